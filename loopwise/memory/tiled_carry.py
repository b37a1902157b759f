"""A tiled product that keeps its output on chip for the group after it: the residual add (or any
operator) after a product whose tiling holds the whole output as one accumulator.

A product run alone is tiled (:mod:`loopwise.memory.layerwise`). When its tiling keeps the whole
output on chip as one tile (the accumulator stays while the reduction streams the operands
through) and writes each output element once, the output is on chip whole when the product ends:
instead of being stored and loaded again, it can stay there for the next group, which takes it in
as a carried tensor (``carried_in``) and reads it there, as an epilogue of the product would.
"""

from __future__ import annotations

from dataclasses import replace

from loopwise.memory.plan_records import Group
from loopwise.memory.tiling import tile_footprints, traffic


def kept_tiled(planner, i: int) -> tuple[int, Group] | None:
    """Operator ``i`` alone with its tiling, its output kept on chip for the next group: (the
    boundary's carried set that is exactly that output, the group), or None where the tiling does
    not hold the whole output at once, writes part of it more than once, the output is a model
    output, or no carried set of the boundary after ``i`` is that output alone."""
    single = planner.single(i)
    choice = planner.choices.get(i)
    op = planner.alone_ops[i]
    if not single.tiled or choice is None or len(op.writes) != 1:
        return None
    out = op.writes[0].tensor
    whole = planner.facts[i][out][0]
    elem = op.tensor(out).elem_bytes
    moved = traffic(op, choice.tiles, list(choice.order))[out]
    if out in planner.outputs or moved.loads or moved.stores * elem != whole:
        return None
    if tile_footprints(op, choice.tiles)[out] * elem != whole:
        return None
    sets = planner.carry_sets[i + 1]
    k = next((k for k, kept in enumerate(sets) if k and set(kept) == {out}), None)
    if k is None:
        return None
    return k, replace(single, traffic_bytes=single.traffic_bytes - whole, per_operator=(single.traffic_bytes - whole,),
                      carried_out=(out,))
