"""The planner's largest tile (``tiling.tile_footprints``) against every tile counted one by one:
a buffer sized from it must hold each tile of the grid (first, interior, last full and last
partial), so a plan made with it passes the replay's check of each tile against the graph."""

from __future__ import annotations

import itertools
import json

import pytest

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, conv2d, matmul
from loopwise.memory.polyhedral import footprint
from loopwise.memory.tiling import tile_footprints, tile_sizes


def _largest_by_enumeration(op: Operator, tiles: dict[str, int]) -> dict[str, int]:
    """Per tensor, the most any tile of the grid touches, every tile measured."""
    size = tile_sizes(op, tiles)
    starts = [range(0, e, size[d]) for d, e in op.dims.items()]
    best = {t.name: 0 for t in op.tensors}
    for corner in itertools.product(*starts):
        box = {d: (s, size[d]) for d, s in zip(op.dims, corner)}
        for t in op.tensors:
            best[t.name] = max(best[t.name], footprint(op, t.name, box))
    return best


def _stem() -> Operator:
    """7x7, stride 2, padding 3: the padding reaches past the first two tiles of one column."""
    return conv2d("conv:stem", 1, 3, 32, 32, 8, 7, 7, stride=2, pad=3, tensors=("x", "w", "y"))


def _conv_over_concat(half: int = 4, k: int = 8, size: int = 16) -> Operator:
    """A 3x3 convolution padded by one over cat(a, b) along the channels (``half`` each): each part
    is read through a guard on the channel loop."""
    c = 2 * half
    dims = {"n": 1, "k": k, "c": c, "p": size, "q": size, "r": 3, "s": 3}
    tensors = (Tensor("a", (1, half, size, size)), Tensor("b", (1, half, size, size)), Tensor("w", (k, c, 3, 3)),
               Tensor("y", (1, k, size, size)))
    reads = (Access("a", ("n", "c", "p + r - 1", "q + s - 1"), f"c < {half}"),
             Access("b", ("n", f"c - {half}", "p + r - 1", "q + s - 1"), f"c >= {half}"),
             Access("w", ("k", "c", "r", "s")))
    return Operator("conv:cat", dims, tensors, reads, (Access("y", ("n", "k", "p", "q")),), macs=k * c * 9 * size * size)


def _pool_by_halves() -> Operator:
    """A read through a division (each input row read by two output rows) and a shifted slice."""
    dims = {"i": 24, "j": 10}
    tensors = (Tensor("x", (12, 10)), Tensor("z", (30, 10)), Tensor("y", (24, 10)))
    reads = (Access("x", ("floor(i/2)", "j")), Access("z", ("i + 6", "j")))
    return Operator("up:h", dims, tensors, reads, (Access("y", ("i", "j")),))


def test_padding_wider_than_a_tile_is_measured_at_an_interior_tile():
    op = _stem()
    got = tile_footprints(op, {"q": 1})
    assert got["x"] == 672  # 3 channels x 32 rows x 7 columns: a tile clear of the padding
    assert got == _largest_by_enumeration(op, {"q": 1})


def test_a_concatenation_part_is_measured_where_its_halo_is_not_clipped():
    op = _conv_over_concat()
    tiles = {"c": 4, "p": 4, "q": 4}
    got = tile_footprints(op, tiles)
    assert got["a"] == 144  # 4 channels x 6 x 6: an interior tile of the part's channels
    assert got == _largest_by_enumeration(op, tiles)


@pytest.mark.parametrize("op,tiles", [
    (_stem(), {"p": 3, "q": 2}),
    (_stem(), {"p": 1, "q": 1, "c": 2}),
    (_conv_over_concat(), {"c": 3, "p": 5}),
    (_conv_over_concat(), {"c": 6, "q": 3, "r": 2}),
    (conv2d("c", n=1, c=2, h=13, w=13, k=2, r=5, s=5, pad=2), {"p": 1, "q": 2}),
    (conv2d("c", n=2, c=4, h=9, w=9, k=4, r=3, s=3, pad=1, groups=2), {"g": 1, "p": 2, "n": 1}),
    (matmul("mm", 96, 40, 24), {"m": 64, "n": 32}),
    (_pool_by_halves(), {"i": 3}),
    (_pool_by_halves(), {"i": 5, "j": 4}),
])
def test_the_largest_tile_is_the_largest_of_every_tile(op, tiles):
    assert tile_footprints(op, tiles) == _largest_by_enumeration(op, tiles)


def _plan_and_verify(graph: Graph, capacity: int):
    from loopwise.memory.planner import plan
    from loopwise.memory.verify import verify

    p = plan(graph, capacity_bytes=capacity)
    data = json.loads(json.dumps({"total_bytes": p.total_bytes, "schedule": p.schedule, "operators_folded": []}))
    assert any((g.get("loop_nest") or {}).get("runs") == "tiled" for g in data["schedule"]["groups"])
    return verify(data, graph)


@pytest.mark.parametrize("capacity", [3000, 4000])
def test_a_plan_of_the_stem_holds_every_tile(capacity):
    verdict = _plan_and_verify(Graph("stem", (_stem(),), frozenset({"w"})), capacity)
    assert verdict.ok, verdict.violations


@pytest.mark.slow
def test_a_plan_of_a_convolution_over_a_concatenation_holds_every_tile():
    graph = Graph("cat", (_conv_over_concat(half=16, k=16),), frozenset({"w"}))
    verdict = _plan_and_verify(graph, 2400)
    assert verdict.ok, verdict.violations
