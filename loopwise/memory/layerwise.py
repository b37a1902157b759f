"""The layer-by-layer baseline: each operator alone, with its own best tiling under the scratchpad's
capacity, its inputs read from and its outputs written to DRAM (what ZigZag and Timeloop model).

The tiling search is a local search over tile sizes and tile-loop orders (reduction loops innermost
or outermost, output loops in the operator's order or rotated), scored by the exact traffic of
:mod:`loopwise.memory.tiling`. A dimension's candidate sizes are its extent's divisors, its
halvings rounded up (196, 98, 49, ...) and the powers of two below it: a size that splits the
extent evenly wastes no buffer on a partial tile. The search starts from the whole operator (one
tile: its compulsory traffic, if it fits) and shrinks the dimension whose halving costs the least
traffic until the tile fits. Then, round by round, it takes the best of these moves while one
lowers the traffic: one dimension to a neighbouring candidate; one dimension grown to the largest
candidate that fits; and a trade, one dimension shrunk and another grown as far as the freed buffer
allows (an input-stationary tiling is often two dimensions away: the reduction grown to whole while
the output columns shrink). It finds a good tiling, not a proven optimum. Operators that differ only
in their names share one search.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from loopwise.memory.graph import operator_compulsory_bytes
from loopwise.memory.ir import Operator
from loopwise.memory.tiling import buffer_bytes, tile_grid, traffic_bytes


@dataclass(frozen=True)
class TilingChoice:
    operator: str
    tiles: dict[str, int]
    order: tuple[str, ...]
    traffic_bytes: int
    buffer_bytes: int
    evaluated: int = field(default=0, compare=False)


def tile_orders(op: Operator) -> list[tuple[str, ...]]:
    """The tile-loop orders the search tries: output loops then reductions, the reverse, and the
    output loops rotated."""
    written = {i for a in op.writes for i in a.index}
    outputs = [d for d in op.dims if any(d in i for i in written)]
    reductions = [d for d in op.dims if d not in outputs]
    orders = [tuple(outputs + reductions), tuple(reductions + outputs)]
    for k in range(1, len(outputs)):
        orders.append(tuple(outputs[k:] + outputs[:k] + reductions))
    return list(dict.fromkeys(orders))


def candidate_sizes(extent: int) -> list[int]:
    """Tile sizes tried along a dimension of ``extent``: divisors, halvings rounded up, powers of two."""
    out = {extent}
    s = 1
    while s < extent:
        out.add(s)
        s *= 2
    s = extent
    while s > 1:
        s = -(-s // 2)
        out.add(s)
    for d in range(1, math.isqrt(extent) + 1):
        if extent % d == 0:
            out.update((d, extent // d))
    return sorted(out)


_CACHE: dict[tuple, TilingChoice] = {}


def _shape_key(op: Operator, capacity_bytes: int, max_evaluations: int) -> tuple:
    """What the search depends on, with tensors named by position (so that names do not matter)."""
    pos = {t.name: j for j, t in enumerate(op.tensors)}
    acc = lambda a: (pos[a.tensor], a.index, a.guard)  # noqa: E731
    return (tuple(op.dims.items()), tuple((t.shape, t.elem_bytes) for t in op.tensors),
            tuple(map(acc, op.reads)), tuple(map(acc, op.writes)), tuple(sorted(op.coupled)),
            capacity_bytes, max_evaluations)


def best_tiling(op: Operator, capacity_bytes: int, max_evaluations: int = 400) -> TilingChoice:
    """A tiling of ``op`` whose tile fits ``capacity_bytes``, with the least traffic found (at most
    about ``max_evaluations`` traffic counts)."""
    key = _shape_key(op, capacity_bytes, max_evaluations)
    if key not in _CACHE:
        _CACHE[key] = _Search(op, capacity_bytes, max_evaluations).run()
    choice = _CACHE[key]
    return replace(choice, operator=op.name, tiles=dict(choice.tiles))


class _Search:
    def __init__(self, op: Operator, capacity: int, budget: int):
        self.op, self.cap, self.budget = op, capacity, budget
        self.orders = tile_orders(op)
        self.free = [d for d in op.dims if d not in op.coupled and op.dims[d] > 1]
        self.sizes = {d: candidate_sizes(op.dims[d]) for d in op.dims}
        self.need: dict[tuple, int] = {}
        self.scores: dict[tuple, tuple[int, tuple[str, ...]]] = {}

    def buffer(self, tiles: dict[str, int]) -> int:
        key = tuple(tiles.values())
        if key not in self.need:
            self.need[key] = buffer_bytes(self.op, tiles)
        return self.need[key]

    def fits(self, tiles: dict[str, int]) -> bool:
        return self.buffer(tiles) <= self.cap

    def score(self, tiles: dict[str, int]) -> tuple[int, tuple[str, ...]]:
        """The least traffic of a fitting tiling over the orders, and that order."""
        key = tuple(tiles.values())
        if key not in self.scores:
            # the traffic depends on the order of the dimensions cut into more than one tile alone
            # (:func:`loopwise.memory.tiling.tile_grid`): orders that agree there are counted once
            counted: dict[tuple[str, ...], int] = {}
            options = []
            for od in self.orders:
                grid = tile_grid(self.op, tiles, od)
                if grid not in counted:
                    counted[grid] = traffic_bytes(self.op, tiles, list(od))
                options.append((counted[grid], od))
            self.scores[key] = min(options)
        return self.scores[key]

    def run(self) -> TilingChoice:
        floor = operator_compulsory_bytes(self.op)  # every touched element once: nothing does better
        first = self.shrink_to_fit(dict(self.op.dims))
        if self.score(first)[0] <= floor:  # the whole operator, or the first tiling that fits, is best
            value, order = self.score(first)
            return TilingChoice(self.op.name, first, order, value, self.buffer(first), evaluated=self.evaluated)
        starts = list({tuple(t.values()): t for t in [first] + self.stationary_starts()}.values())
        share = self.budget // len(starts)  # each start its share of the traffic counts
        best = None
        for tiles in sorted(starts, key=lambda t: self.score(t)[0]):
            found = self.descend(tiles, floor, self.evaluated + share)
            if best is None or found[0] < best[0]:
                best = found
            if best[0] <= floor:
                break
        value, order, tiles = best
        return TilingChoice(self.op.name, tiles, order, value, self.buffer(tiles), evaluated=self.evaluated)

    def descend(self, tiles: dict[str, int], floor: int, budget: int):
        """From ``tiles``, the best move of each round while one lowers the traffic: (traffic, order, tiles)."""
        best, order = self.score(tiles)
        while best > floor and self.evaluated < budget:
            improved = False
            for trial in self.moves(tiles):
                if self.evaluated >= budget:
                    break
                value, od = self.score(trial)
                if value < best:
                    best, order, tiles, improved = value, od, trial, True
            if not improved:
                break
        return best, order, tiles

    def stationary_starts(self) -> list[dict[str, int]]:
        """For each tensor that fits whole with every other dimension at 1: that tiling, with the
        other dimensions then grown one at a time (the growth with the least traffic first) while
        one fits. The tensor stays on chip while the others stream past it."""
        out = []
        for t in self.op.tensors:
            indexing = {d for a in self.op.accesses(t.name) for e in a.index for d in self.op.dims
                        if re.search(rf"\b{re.escape(d)}\b", e)}
            tiles = {d: (e if d in indexing or d not in self.free else 1) for d, e in self.op.dims.items()}
            if tiles == self.op.dims or not self.fits(tiles):
                continue
            while True:
                grown = [g for d in self.free if d not in indexing and (g := self.grown(tiles, d))]
                if not grown:
                    break
                tiles = min(grown, key=lambda g: self.score(g)[0])
                indexing |= {d for d in self.free if tiles[d] != 1}
            out.append(tiles)
        return out

    @property
    def evaluated(self) -> int:
        return len(self.scores) * len(self.orders)

    def shrink_to_fit(self, tiles: dict[str, int]) -> dict[str, int]:
        while not self.fits(tiles):
            options = []
            for d in self.free:
                if tiles[d] > 1:
                    trial = dict(tiles, **{d: -(-tiles[d] // 2)})
                    options.append((self.buffer(trial), d, trial))
            if not options:
                raise ValueError(f"{self.op.name}: even a single-element tile needs more than {self.cap} bytes")
            fitting = [o for o in options if o[0] <= self.cap]
            if fitting:  # the fitting shrink with the least traffic
                return min(fitting, key=lambda o: self.score(o[2])[0])[2]
            tiles = min(options, key=lambda o: o[0])[2]  # else free the most buffer
        return tiles

    def grown(self, tiles: dict[str, int], d: str) -> dict[str, int] | None:
        """``tiles`` with ``d`` at the largest candidate above its size that still fits, if any."""
        above = [s for s in self.sizes[d] if s > tiles[d]]
        lo, hi = 0, len(above)  # above[:lo] fit, above[hi:] do not (the footprint grows with the size)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fits(dict(tiles, **{d: above[mid]})):
                lo = mid + 1
            else:
                hi = mid
        return dict(tiles, **{d: above[lo - 1]}) if lo else None

    def moves(self, tiles: dict[str, int]) -> list[dict[str, int]]:
        """Fitting neighbours of ``tiles``: single steps, growths to fit, trades between two dimensions."""
        out = []
        for d in self.free:
            sizes = self.sizes[d]
            at = sizes.index(tiles[d]) if tiles[d] in sizes else 0
            for j in (at - 1, at + 1):
                if 0 <= j < len(sizes):
                    trial = dict(tiles, **{d: sizes[j]})
                    if self.fits(trial):
                        out.append(trial)
            grown = self.grown(tiles, d)
            if grown:
                out.append(grown)
        for down in self.free:
            sizes = self.sizes[down]
            at = sizes.index(tiles[down]) if tiles[down] in sizes else 0
            for j in range(max(0, at - 3), at):
                smaller = dict(tiles, **{down: sizes[j]})
                for up in self.free:
                    if up != down:
                        grown = self.grown(smaller, up)
                        if grown:
                            out.append(grown)
        return list({tuple(t.values()): t for t in out}.values())
