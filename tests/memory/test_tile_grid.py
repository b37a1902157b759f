"""The traffic of a tiling depends on the tile-loop order only through the order of the dimensions
cut into more than one tile (:func:`loopwise.memory.tiling.tile_grid`), so the tiling search counts
each such grid once: orders that agree there move the same bytes."""

from __future__ import annotations

import pytest

from loopwise.memory.ir import conv2d, matmul
from loopwise.memory.layerwise import _Search, tile_orders
from loopwise.memory.tiling import tile_grid, traffic_bytes

OPS = [(matmul("mm", 24, 40, 16), [{"m": 8, "n": 40, "k": 16}, {"m": 8, "n": 20, "k": 16}, {"m": 24, "n": 40, "k": 4}]),
       (conv2d("conv", 2, 4, 6, 6, 8, 3, 3, stride=1, pad=1),
        [{"n": 1}, {"n": 1, "k": 4}, {"k": 2, "c": 2}])]


@pytest.mark.parametrize("case", range(len(OPS)))
def test_orders_with_the_same_grid_move_the_same_bytes(case):
    op, tilings = OPS[case]
    orders = tile_orders(op)
    shared = 0
    for tiles in tilings:
        tiles = {d: tiles.get(d, e) for d, e in op.dims.items()}
        by_grid: dict[tuple, set[int]] = {}
        for od in orders:
            by_grid.setdefault(tile_grid(op, tiles, od), set()).add(traffic_bytes(op, tiles, list(od)))
        assert all(len(values) == 1 for values in by_grid.values())
        shared += len(orders) - len(by_grid)
    assert shared > 0  # the cases do have orders that agree on their grid


@pytest.mark.parametrize("case", range(len(OPS)))
def test_the_search_scores_a_tiling_as_the_least_over_every_order(case):
    op, tilings = OPS[case]
    search = _Search(op, 10**9, 400)
    for tiles in tilings:
        tiles = {d: tiles.get(d, e) for d, e in op.dims.items()}
        assert search.score(tiles) == min((traffic_bytes(op, tiles, list(od)), od) for od in search.orders)
