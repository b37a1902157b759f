"""An elementwise operator applied to each output tile of a tiled product as the tile is finished
(an epilogue): the residual add after a projection, a bias, a scale.

A product that does not fit runs alone, tiled (:mod:`loopwise.memory.layerwise`), and stores its
output tile by tile; an elementwise operator after it then loads that output again. When the
product's output has no other reader, the elementwise operator can instead run on each finished
output tile while it is still on chip: the output never reaches DRAM, and what the epilogue reads
besides (the residual) is loaded tile by tile. The two run as one loop nest: the product's, with
its own tiling, and the epilogue's other tensors indexed by the product's output loops
(:func:`with_epilogue`), so the traffic of the product's tensors is the exact count of
:mod:`loopwise.memory.tiling` under that tiling. The epilogue runs once the tile's reduction is
done, when the operands' tile buffers are free: its inputs stream through the room left beside the
output tile, and are freed before the next tile's reduction, so each is loaded afresh for every
output tile (:func:`epilogue_traffic`), even where two tiles read the same part of it (a per-row
scale). It writes its result over
the product's output tile (same index, same element size), so that tile is the accumulator and
the result at once.

An operator is an epilogue of the product only when every one of its loops indexes the product's
output plainly, in the output's own positions, and its result the same way: no reduction, no
coupled row (a softmax, a norm's statistic), no transposed or shifted read; and when it reads none
of the product's operands (their tile would be held through the reduction beside the others).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loopwise.memory.ir import Access, Operator
from loopwise.memory.layerwise import TilingChoice
from loopwise.memory.plan_records import Group
from loopwise.memory.tiling import Traffic, tile_footprints, tile_sizes, touched_per_tile, traffic


@dataclass(frozen=True)
class Epilogue:
    """A product and its epilogue as one loop nest (``fused``), with that nest's tiling."""

    product: Operator
    reader: Operator
    fused: Operator
    choice: TilingChoice  # the product's own tiling, which the epilogue follows
    intermediate: str  # the product's output, which never leaves the chip
    buffers: dict[str, int]  # the epilogue's other inputs: the bytes each streams through
    moved: dict[str, Traffic]  # per tensor of ``fused``, the elements loaded and stored (:func:`epilogue_traffic`)


def _plain(index: tuple[str, ...], dims: dict[str, int]) -> bool:
    return all(e in dims for e in index) and len(set(index)) == len(index)


def with_epilogue(product: Operator, reader: Operator) -> Operator | None:
    """``product`` with ``reader`` applied to its output as an epilogue: one operator over the
    product's loops that reads the product's operands and the reader's other inputs and writes
    the reader's result; None where ``reader`` is no elementwise reader of the product's output."""
    if len(product.writes) != 1 or len(reader.writes) != 1 or reader.coupled:
        return None
    out = product.writes[0]
    if not _plain(out.index, product.dims) or out.guard:
        return None
    of_out = [a for a in reader.reads if a.tensor == out.tensor]
    result = reader.writes[0]
    if len(of_out) != 1 or of_out[0].guard or of_out[0].index != result.index or result.guard:
        return None
    index = of_out[0].index
    if not _plain(index, reader.dims) or set(index) != set(reader.dims):
        return None  # a loop of the reader that does not index the output: a reduction, a broadcast
    if any(reader.dims[e] != product.dims[p] for e, p in zip(index, out.index)):
        return None
    if reader.tensor(result.tensor).elem_bytes != product.tensor(out.tensor).elem_bytes:
        return None  # the result is written over the output tile
    rename = dict(zip(index, out.index))
    word = re.compile(r"\b(" + "|".join(map(re.escape, rename)) + r")\b")
    moved = lambda a: Access(a.tensor, tuple(word.sub(lambda m: rename[m.group(0)], e) for e in a.index),  # noqa: E731
                             word.sub(lambda m: rename[m.group(0)], a.guard))
    others = tuple(moved(a) for a in reader.reads if a.tensor != out.tensor)
    if any(a.tensor in {t.name for t in product.tensors} for a in others):
        return None  # an operand read again by the epilogue: its tile is held through the reduction
    tensors = {t.name: t for t in product.tensors if t.name != out.tensor}
    for t in reader.tensors:
        if t.name != out.tensor:
            tensors.setdefault(t.name, t)
    return Operator(product.name, dict(product.dims), tuple(tensors.values()), product.reads + others,
                    (moved(result),), product.macs + reader.macs, product.coupled)


def epilogue_group(planner, i: int) -> tuple[Group, Epilogue] | None:
    """Operator ``i`` (a product too big to run whole) with operator ``i + 1`` applied to each of
    its output tiles, as one group; None where ``i + 1`` is not an elementwise reader of its
    output, that output has another reader or is a model output, or the product's tiling leaves a
    tile unfinished (partial sums stored and loaded back) or no room beside its output tile, or
    holds the whole output in one tile (then it is carried to the next group whole:
    :mod:`loopwise.memory.tiled_carry`)."""
    if i + 1 >= len(planner.ops) or not planner.single(i).tiled:
        return None
    product, reader, choice = planner.alone_ops[i], planner.alone_ops[i + 1], planner.choices[i]
    if len(product.writes) != 1:
        return None
    out = product.writes[0].tensor
    if out in planner.outputs or planner.uses.get(out) != [i, i + 1]:
        return None
    fused = with_epilogue(product, reader)
    if fused is None:
        return None
    result = fused.writes[0].tensor
    if tile_footprints(product, choice.tiles)[out] >= planner.facts[i][out][0] // product.tensor(out).elem_bytes:
        return None  # one tile holds the whole output: it stays on chip for the next group as it is
    moved = epilogue_traffic(fused, choice, {t.name for t in product.tensors})
    if moved[result].loads:
        return None  # partial sums go out and come back: a tile is not finished when the epilogue would run
    buffers = _epilogue_buffers(fused, choice, {t.name for t in product.tensors}, planner.cap)
    if buffers is None:
        return None
    size = {t.name: t.elem_bytes for t in fused.tensors}
    bytes_of = {t: v.total * size[t] for t, v in moved.items()}
    first = sum(b for t, b in bytes_of.items() if t in {x.name for x in product.tensors})
    total = sum(bytes_of.values())
    peak = max(choice.buffer_bytes, tile_footprints(fused, choice.tiles)[result] * size[result] + sum(buffers.values()))
    grp = Group((planner.names[i], planner.names[i + 1]), total, peak, (out,), tiled=True, occupancy=(peak, peak),
                per_operator=(first, total - first))
    return grp, Epilogue(product, reader, fused, choice, out, buffers, moved)


def epilogue_traffic(fused: Operator, choice: TilingChoice, mine: set[str]) -> dict[str, Traffic]:
    """Per tensor of ``fused``, the elements moved: the product's tensors (``mine``) and the result
    as its tiling moves them (:func:`~loopwise.memory.tiling.traffic`); each of the epilogue's
    other inputs loaded afresh for every output tile, its buffer freed while the next tile's
    reduction runs (:func:`~loopwise.memory.tiling.touched_per_tile` over the output loops)."""
    moved = traffic(fused, choice.tiles, list(choice.order))
    result = fused.writes[0]
    reads = tuple(a for a in fused.reads if a.tensor not in mine)
    if not reads:
        return moved
    loops = {d: fused.dims[d] for d in result.index}
    tensors = tuple(t for t in fused.tensors if t.name in {a.tensor for a in reads})
    per_tile = touched_per_tile(Operator(fused.name, loops, tensors, reads, ()),
                                {d: s for d, s in choice.tiles.items() if d in loops})
    return {t: Traffic(per_tile[t], 0) if t in per_tile else v for t, v in moved.items()}


def _epilogue_buffers(fused: Operator, choice: TilingChoice, mine: set[str], capacity: int) -> dict[str, int] | None:
    """The buffers of the epilogue's other inputs: their tile, or where the room left beside the
    output tile is less (the product's operand tiles are free by then), shares of that room, each
    streamed through its share chunk by chunk; None where no room is left."""
    size = {t.name: t.elem_bytes for t in fused.tensors}
    foot = tile_footprints(fused, choice.tiles)
    result = fused.writes[0].tensor
    others = {t: foot[t] * size[t] for t in size if t not in mine and t != result}
    room = capacity - foot[result] * size[result]
    want = sum(others.values())
    if want <= room:
        return others
    if room < size[result] * max(1, len(others)):
        return None
    return {t: max(size[t], b * room // want // size[t] * size[t]) for t, b in others.items()}


def epilogue_loop_nest(ep: Epilogue) -> dict:
    """The loops of the product and of its epilogue: the fused nest's tiles, each operator under
    its own dimension names."""
    sizes = tile_sizes(ep.fused, ep.choice.tiles)
    back = dict(zip(ep.product.writes[0].index, next(a.index for a in ep.reader.reads if a.tensor == ep.intermediate)))
    loop = lambda d: {"dim": d, "extent": ep.fused.dims[d], "tile": sizes[d],  # noqa: E731
                      "trips": -(-ep.fused.dims[d] // sizes[d])}
    order = list(ep.choice.order)
    return {"runs": "tiled", "loops": [], "operators": [
        {"operator": ep.product.name, "order": order, "loops": [loop(d) for d in order]},
        {"operator": ep.reader.name, "order": [back[d] for d in order if d in back],
         "loops": [dict(loop(d), dim=back[d]) for d in order if d in back]}]}
