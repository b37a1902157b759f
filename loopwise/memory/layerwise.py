"""The layer-by-layer baseline: each operator alone, with its own best tiling under the scratchpad's
capacity, its inputs read from and its outputs written to DRAM (what ZigZag and Timeloop model).

The tiling search is a local search over tile sizes (powers of two and the full extent per
dimension) and tile-loop orders (reduction loops innermost or outermost, output loops in the
operator's order or rotated), scored by the exact traffic of :mod:`loopwise.memory.tiling`. It
starts from the whole operator (one tile: its compulsory traffic, if it fits) and shrinks the
dimension whose halving costs the least traffic per byte of buffer freed until the tile fits, then
tries halving or doubling each dimension, in each order, while any lowers the traffic. It finds a good tiling,
not a proven optimum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopwise.memory.graph import operator_compulsory_bytes
from loopwise.memory.ir import Operator
from loopwise.memory.tiling import buffer_bytes, traffic_bytes


@dataclass(frozen=True)
class TilingChoice:
    operator: str
    tiles: dict[str, int]
    order: tuple[str, ...]
    traffic_bytes: int
    buffer_bytes: int
    evaluated: int = field(default=0, compare=False)


def _orders(op: Operator) -> list[tuple[str, ...]]:
    written = {i for a in op.writes for i in a.index}
    outputs = [d for d in op.dims if any(d in i for i in written)]
    reductions = [d for d in op.dims if d not in outputs]
    orders = [tuple(outputs + reductions), tuple(reductions + outputs)]
    for k in range(1, len(outputs)):
        orders.append(tuple(outputs[k:] + outputs[:k] + reductions))
    return list(dict.fromkeys(orders))


def _sizes(extent: int) -> list[int]:
    out, s = [], 1
    while s < extent:
        out.append(s)
        s *= 2
    return out + [extent]


def best_tiling(op: Operator, capacity_bytes: int, max_evaluations: int = 150) -> TilingChoice:
    """A tiling of ``op`` whose tile fits ``capacity_bytes``, with the least traffic found."""
    orders = _orders(op)
    seen: dict[tuple, tuple[int, int]] = {}

    def score(tiles: dict[str, int], order: tuple[str, ...]) -> tuple[int, int]:
        key = (tuple(sorted(tiles.items())), order)
        if key not in seen:
            need = buffer_bytes(op, tiles)
            seen[key] = (traffic_bytes(op, tiles, list(order)) if need <= capacity_bytes else -1, need)
        return seen[key]

    tiles = dict(op.dims)
    order = orders[0]
    while score(tiles, order)[1] > capacity_bytes:  # shrink until one tile fits
        options = []
        for d, size in tiles.items():
            if size == 1 or d in op.coupled:
                continue
            trial = dict(tiles, **{d: max(1, size // 2)})
            options.append((buffer_bytes(op, trial), d, trial))
        if not options:
            raise ValueError(f"{op.name}: even a single-element tile needs more than {capacity_bytes} bytes")
        options.sort(key=lambda o: o[0])
        fits = [o for o in options if o[0] <= capacity_bytes]
        if fits:  # the first fitting shrink with the least traffic
            tiles = min(fits, key=lambda o: min(score(o[2], od)[0] for od in orders))[2]
        else:  # free the most buffer
            tiles = options[0][2]
    order = min(orders, key=lambda od: score(tiles, od)[0] if score(tiles, od)[0] >= 0 else float("inf"))
    best = score(tiles, order)[0]
    floor = operator_compulsory_bytes(op)  # every touched element once: nothing can do better
    improved = best > floor
    while improved and len(seen) < max_evaluations:
        improved = False
        for d in op.dims:
            if d in op.coupled:
                continue
            sizes = _sizes(op.dims[d])
            at = sizes.index(tiles[d]) if tiles[d] in sizes else 0
            for size in sizes[max(0, at - 1):at + 2]:  # the neighbouring sizes: halve or double
                if size == tiles[d]:
                    continue
                trial = dict(tiles, **{d: size})
                for od in orders:
                    value = score(trial, od)[0]
                    if 0 <= value < best:
                        best, tiles, order, improved = value, trial, od, value > floor
    return TilingChoice(op.name, tiles, tuple(order), best, score(tiles, order)[1], evaluated=len(seen))
