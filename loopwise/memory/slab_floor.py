"""A floor under the traffic of a group in slabs, cheaper than sizing it
(:func:`loopwise.memory.slabs.best_slab`): the planner skips sizing a group whose floor does not
go below the traffic it has to beat.

For every outer slab size and inner slab size, the group moves what it moves once, what every
outer slab moves again, and its invariants: each loaded once when resident, else once per inner
slab, per inner slab of every outer slab, or per outer slab (:class:`loopwise.memory.slabs.Invariants`).
The invariants made resident must fit beside what the slabs hold at the operator holding the most,
so the loads that residency saves are at most those of a fractional knapsack: the invariants with
the most bytes loaded per byte held first, in the room the slabs leave. Sizes where the slabs
alone do not fit are left out; the floor is the least over the rest (infinite when none is left).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from loopwise.memory.handed import handed_cover, outer_sizes
from loopwise.memory.slabs import Invariants, sizes_below

# float sums of byte counts are exact, but the peaks best_slab compares with the capacity take
# other paths through the same numbers: a size is left out only when it is past this slack
_SLACK = 1e-6


def slab_floor(capacity: int, moved: int, outer_moved: int, held: dict[str, np.ndarray], inv: Invariants,
               extent: int, outer_extent: int, handed=(), loops=()) -> float:
    """At most the traffic :func:`~loopwise.memory.slabs.best_slab` finds for the same group
    (``held``: bytes held at each operator by how they are sliced, ``handed`` and ``loops``: the
    carried tensors held part by part and each operator's inner loop, as best_slab takes them)."""
    shares, counts = _slabs(extent)
    if not len(counts):
        return math.inf
    per_inner, per_both, per_outer = _loads(inv)
    floor = math.inf
    for outer_size in (outer_sizes(outer_extent) if outer_extent > 1 else [1]):
        outer_count = math.ceil(outer_extent / outer_size)
        fo = outer_size / outer_extent
        sliced = held["both"] * fo + held["inner"]  # bytes held per unit of slab share
        works = shares[:, None] * sliced + (held["whole"] + held["span"] * fo)
        if handed:
            works = works + handed_cover(handed, loops, len(sliced), extent, outer_size, outer_extent)
        works = np.max(works, axis=1)
        room = capacity * (1 + _SLACK) + 1 - works
        fits = room >= 0
        if not fits.any():
            if handed:
                continue
            break  # a larger outer slab holds more at every operator
        streamed = moved + outer_count * (outer_moved + per_outer) + counts * (per_inner + outer_count * per_both)
        times = max(outer_count if per_both else 1, 1 if per_inner else 0) * counts
        times = np.maximum(times, outer_count if per_outer else 0)  # loads of one invariant, at most
        cum_w, cum_v = _knapsack(inv, fo)
        saved = np.maximum(times - 1, 0) * np.interp(room, cum_w, cum_v)
        floor = min(floor, float((streamed - saved)[fits].min()))
    return floor


@lru_cache(maxsize=256)
def _slabs(extent: int) -> tuple[np.ndarray, np.ndarray]:
    """Each slab size's share of the extent, and the count of slabs."""
    sizes = sizes_below(extent)
    return np.array(sizes, dtype=float) / extent, np.array([math.ceil(extent / s) for s in sizes], dtype=float)


def _made(inv: Invariants) -> dict:
    """What the floor has made of an invariant table (kept with the table)."""
    return inv.floor_parts


def _loads(inv: Invariants) -> tuple[float, float, float]:
    """Bytes loaded by the invariants streamed per inner slab, per inner slab of every outer slab,
    and per outer slab."""
    made = _made(inv)
    if "loads" not in made:
        plain = ~inv.spans
        made["loads"] = (float(inv.loaded[inv.by_outer & plain].sum()), float(inv.loaded[~inv.by_outer & plain].sum()),
                         float(inv.loaded[inv.spans].sum()))
    return made["loads"]


def _knapsack(inv: Invariants, fo: float) -> tuple[np.ndarray, np.ndarray]:
    """The most bytes of invariants loaded once that invariants held in a given room can load, as
    a piecewise linear curve (room, loads): the most loads per byte held first, a fraction of the
    last one allowed (an upper bound on what whole invariants reach). An invariant that holds
    nothing is in from a room of 0 on."""
    made = _made(inv)
    if fo not in made:
        weight = np.where(inv.by_outer, inv.whole * fo, inv.whole)
        free = weight <= 0
        w, v = weight[~free], inv.loaded[~free]
        order = np.argsort(-(v / w), kind="stable")
        made[fo] = (np.concatenate([[0.0], np.cumsum(w[order])]),
                    float(inv.loaded[free].sum()) + np.concatenate([[0.0], np.cumsum(v[order])]))
    return made[fo]
