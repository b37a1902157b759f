"""Tensors handed on chip from one group run in slabs to the next, freed and made slab by slab.

A tensor carried into a group run in slabs is on chip whole when the loop starts. When the group
reads all of it and its last reader in the group slices it by every slab level the group has, the
part of one slab is dead once that reader has run on the slab: the group can free it there. A
tensor carried out is made part by part by its producer and its parts stay on chip. Where a group
carries one tensor in and one out, of the same size, cut alike in the same inner loop, the second
made no earlier than the first's slab is read (a residual stream: ``x + f(x)``), the second is
written over the first slab by slab, in the same place (:func:`handed_pair`), and what the two
hold at a slab is the parts of the first still to be read and the parts of the second made so
far, not both whole: about one of them plus a slab. Both must be cut into parts that follow each
other in the tensor's layout (:func:`_in_order`), so that the parts one group made are the parts
the next frees. Anywhere else a carried tensor is held whole through the loop, as before.

Both are linear in the slab's index within the outer slab and in the outer slab's index, except
at the last (a smaller last slab, the first tensor all read), so the most they hold together at
an operator is reached at one of the slab pairs (first, second to last, last) x (the same for the
outer slabs): :func:`handed_cover` weighs those nine (a tensor read alone holds the most at the
first slab, one made alone at the last). The place of a pair is reserved for the whole loop, so
they count at least the size of the first there.

The schedule (:mod:`loopwise.memory.schedule`) frees the tensor carried in slab by slab and
places the one carried out over it (:mod:`loopwise.memory.placement`); the replay checks both
from the listed accesses alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from loopwise.memory.segments import segments


@dataclass(frozen=True)
class Handed:
    """A carried tensor held part by part: ``made`` (carried out) or read (carried in)."""

    name: str
    nbytes: int  # the whole tensor, as its producer made it
    at: int  # its last reader (read) or its producer (made), from the group's first operator
    by_inner: bool  # freed or made per inner slab (else per outer slab)
    made: bool


def freed_by_slab(planner, i: int, spec, units: dict, t: str, loops) -> Handed | None:
    """How tensor ``t``, carried into group i.. run in slabs over ``spec`` (``loops``: each
    operator's inner loop), is held part by part, or None when it must stay whole through the loop
    (the group reads only part of it, or a reader reads every slab of it)."""
    u = units.get(t)
    if spec is None or u is None or u.produced or not u.outer:
        return None  # not sliced by the outer dimension wherever it is used: every outer slab reads it
    if u.whole != planner.facts[planner.producer[t]][t][0]:
        return None
    last = u.last - i
    seg = loops or (0,) * len(spec)
    readers = [k for k in planner.uses[t] if i <= k <= u.last and seg[k - i] == seg[last]]
    by_inner = all(_by(planner, k, spec[k - i], t, 1) for k in readers)
    if (not by_inner and spec[last][0] is None) or not _in_order(planner, u.last, spec[last], t, by_inner):
        return None
    return Handed(t, u.whole, last, by_inner, False)


def made_by_slab(planner, i: int, spec, units: dict, t: str) -> Handed | None:
    """How tensor ``t``, carried out of group i.. run in slabs over ``spec``, is made part by
    part (its producer slices it by every slab level), or None."""
    u = units.get(t)
    if spec is None or u is None or not u.produced or not u.outer:
        return None
    first = u.first - i
    if not (_by(planner, u.first, spec[first], t, 0) and _by(planner, u.first, spec[first], t, 1)
            and _in_order(planner, u.first, spec[first], t, True)):
        return None
    return Handed(t, planner.facts[u.first][t][0], first, True, True)


def _by(planner, k: int, pair, t: str, level: int) -> bool:
    """Operator k slices ``t`` by the slab level (0 outer, 1 inner) of ``pair`` (an outer
    dimension that is not there slices everything)."""
    dim = pair[level]
    return dim is None or planner.sigs[k][dim][t] is not None


def _in_order(planner, k: int, pair, t: str, by_inner: bool) -> bool:
    """Whether the slabs of operator k cut ``t`` into parts that lie one after the other in its
    row-major layout: the outer dimension slices its first dimension of more than one element,
    the inner one the next (so parts made by one group and freed by another are the same bytes)."""
    shape = next(x.shape for x in planner.ops[k].tensors if x.name == t)
    cut = [planner.sigs[k][d][t] for d in (pair[0], pair[1] if by_inner else None) if d is not None]
    wide = [p for p, extent in enumerate(shape) if extent > 1]
    return cut == wide[:len(cut)]


def written_over(carried_in: list[Handed], carried_out: list[Handed], loops) -> tuple[str, str] | None:
    """(made, read): the one tensor carried out that can be written over the one carried in,
    slab by slab, in the same place: both cut per inner slab in the same inner loop, the second no
    larger, made no earlier than the first's slab is read."""
    if len(carried_in) != 1 or len(carried_out) != 1:
        return None
    read, made = carried_in[0], carried_out[0]
    seg = loops or (0,) * (max(read.at, made.at) + 1)
    if not (read.by_inner and made.by_inner and made.nbytes == read.nbytes and made.at >= read.at
            and seg[made.at] == seg[read.at]):
        return None
    return made.name, read.name


def handed_pair(planner, i: int, spec, units: dict, carried_in, carried_out) -> dict[str, Handed]:
    """The tensor carried out of group i.. run in slabs over ``spec`` that is written over the
    one carried in, part by part, and that one, by name (none: both held whole)."""
    if spec is None or len(carried_in) != 1 or len(carried_out) != 1:
        return {}
    made = made_by_slab(planner, i, spec, units, next(iter(carried_out)))
    if made is None:
        return {}
    loops = segments(planner, i, spec)
    read = freed_by_slab(planner, i, spec, units, next(iter(carried_in)), loops)
    if read is None or written_over([read], [made], loops) is None:
        return {}
    return {read.name: read, made.name: made}


@lru_cache(maxsize=512)
def handed_cover(parts: tuple[Handed, ...], loops: tuple, length: int, extent: int, outer_size: int,
                 outer_extent: int) -> np.ndarray:
    """The most the tensors of ``parts`` hold together at each operator (columns) for each inner
    slab size tried (rows: :func:`loopwise.memory.slabs.sizes_below`), at outer slabs of
    ``outer_size``. Shared: not to be changed."""
    sizes = sizes_below(extent)
    seg = np.array(loops or (0,) * length)
    ops = np.arange(length)
    fo = outer_size / outer_extent
    outer_count = math.ceil(outer_extent / outer_size)
    size = np.array(sizes, dtype=float)[:, None]
    count = np.ceil(extent / size)
    if not any(h.made for h in parts):  # read alone: the most at the first slab
        o, s = np.ones((1, 1, 1, 1)), np.ones_like(count)[None, None]
    elif all(h.made for h in parts):  # made alone: the most at the last slab
        o, s = np.full((1, 1, 1, 1), float(outer_count)), count[None, None]
    else:
        o = np.array(sorted({1, max(1, outer_count - 1), outer_count}), dtype=float)[:, None, None, None]
        s = np.stack([np.ones_like(count), np.maximum(1, count - 1), count])[None]  # (1, 3, rows, 1)
    held = sum(_held(h, seg, ops, o, s, fo * h.nbytes, size / extent) for h in parts).max(axis=(0, 1))
    if len({h.made for h in parts}) == 2:  # one written over the other: their place is theirs throughout
        held = np.maximum(held, max(h.nbytes for h in parts))
    return held


def sizes_below(extent: int) -> list[int]:
    """Slab (and block) sizes tried: powers of two below the extent."""
    out, size = [], 1
    while size < extent:
        out.append(size)
        size *= 2
    return out


FEW_SLABS = 8  # outer slab counts up to this are each tried


def outer_sizes(extent: int) -> list[int]:
    """Outer slab sizes tried, ascending: :func:`sizes_below`, and for every count of outer slabs
    up to :data:`FEW_SLABS` the smallest size that makes that count (a weight cut into 8 chunks of
    1376 of its 11008 columns, where powers of two give 11 chunks of 1024). An outer slab holds its
    part of the invariants for all the inner slabs, so one more outer slab is one more pass of
    everything the inner slabs stream."""
    few = {-(-extent // count) for count in range(2, FEW_SLABS + 1)}
    return sorted(set(sizes_below(extent)) | {s for s in few if s < extent})


def _held(h: Handed, seg: np.ndarray, ops: np.ndarray, o: np.ndarray, s: np.ndarray, share: float,
          inner: np.ndarray) -> np.ndarray:
    """What ``h`` holds at each operator (last axis) at outer slab o (first axis) and slab s
    (second axis) for each slab size (third axis); ``share``: its outer slab's part; ``inner``:
    one inner slab's fraction of it, per slab size."""
    after = np.where(seg > seg[h.at], share, 0.0)  # its loop done for this outer slab
    here = seg == seg[h.at]
    if h.made:
        done = np.where(here, np.minimum((s - 1 + (ops >= h.at)) * inner * share, share), after)
        return np.minimum(h.nbytes, (o - 1) * share + done)
    gone = np.where(here, np.minimum((s - 1 + (ops > h.at)) * inner * share, share), after) if h.by_inner else after
    return np.maximum(0.0, h.nbytes - (o - 1) * share - gone)
