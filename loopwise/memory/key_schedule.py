"""The schedule of a group run in key blocks (:mod:`loopwise.memory.key_blocks`): an outer loop
(when it has one) around the loop over query blocks (``slab``), whose body is a step before the
key loop (the queries loaded, the output block and the online softmax's running maximum and sum
allocated), the ``key`` loop (per key block: the keys, values and mask blocks loaded at their first
reader and freed after their last, the scores and probabilities made and used on chip) and a step
after it (the output block stored, everything freed)."""

from __future__ import annotations

from loopwise.memory.key_blocks import BEFORE, KEY, OUTER, SLAB, key_loops, outer_positions


def _step(name: str | None, uses=()) -> dict:
    return {"operator": name, "uses": sorted(uses), "needs": [], "alloc": [], "load": [], "store": [], "free": []}


def loops_of(planner, i: int, j: int, grp):
    """The :class:`loopwise.memory.key_blocks.KeyLoops` that ``grp`` (chain i..j-1) was sized with."""
    slab = grp.slab
    for position in outer_positions(planner.ops[i:j]):
        loops = key_loops(planner, i, j, position)
        if loops is not None and loops.outer == slab.outer_dims and loops.query == slab.dims:
            return loops
    raise ValueError(f"group {grp.operators[0]}..: no key loops match its slabs")


def key_block_steps(planner, i: int, j: int, grp) -> list[dict]:
    """The steps of ``grp``, the chain of operators i..j-1 run in key blocks."""
    loops = loops_of(planner, i, j, grp)
    slab = grp.slab
    ops = [_step(planner.ops[k].name, planner.facts[k]) for k in range(i, j)]
    before, after = _step(None), _step(None)
    for h in loops.held:
        entry = [h.tensor, h.nbytes, list(h.labels)]
        if h.first == BEFORE:
            before["alloc"].append(entry)
            if h.role == "load":
                before["load"].append(entry)
            if h.role == "store":
                after["store"].append(entry)
            after["free"].append([h.tensor])
            continue
        ops[h.first]["alloc"].append(entry)
        if h.role == "load":
            ops[h.first]["load"].append(entry)
        ops[h.last]["free"].append([h.tensor])
    key_loop = {"loop": KEY, "extent": slab.key_extent, "size": slab.key_size, "steps": ops}
    body = [{"loop": SLAB, "extent": slab.extent, "size": slab.size, "steps": [before, key_loop, after]}]
    if slab.outer_dims:
        body = [{"loop": OUTER, "extent": slab.outer_extent, "size": slab.outer_size, "steps": body}]
    return body


def key_loop_nest(slab, loops: list[dict]) -> list[dict]:
    """``loops`` (a group's shared loops, outermost first) with its key loop innermost."""
    return loops + [{"label": KEY, "dims": list(slab.key_dims), "extent": slab.key_extent, "size": slab.key_size,
                     "trips": -(-slab.key_extent // slab.key_size)}]
