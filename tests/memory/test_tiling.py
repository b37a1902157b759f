"""Exact DRAM traffic of one operator under a tiling: the textbook counts for a tiled matmul, partial
sums when the reduction runs outside, and the halo a convolution's next tile does not reload."""

from __future__ import annotations

import pytest

from loopwise.memory.ir import conv2d, matmul
from loopwise.memory.tiling import Traffic, buffer_bytes, traffic, traffic_bytes


def test_output_stationary_matmul_moves_the_textbook_amounts():
    op = matmul("mm", 64, 64, 64)
    t = traffic(op, {"m": 32, "n": 32, "k": 32}, ["m", "n", "k"])
    # A: M*K per N-tile column, B: K*N per M-tile row, C: written once
    assert t == {"A": Traffic(2 * 64 * 64, 0), "B": Traffic(2 * 64 * 64, 0), "C": Traffic(0, 64 * 64)}
    assert traffic_bytes(op, {"m": 32, "n": 32, "k": 32}, ["m", "n", "k"]) == (8192 + 8192 + 4096) * 2


def test_reduction_outside_spills_partial_sums_and_keeps_a_stationary():
    op = matmul("mm", 64, 64, 64)
    t = traffic(op, {"m": 32, "n": 32, "k": 32}, ["k", "m", "n"])
    assert t["C"] == Traffic(loads=64 * 64, stores=2 * 64 * 64)  # each C tile visited twice
    assert t["A"].loads == 64 * 64  # A[m, k] stays while n runs innermost
    assert t["B"].loads == 2 * 64 * 64


def test_the_next_tile_reuses_the_halo_of_the_previous_one():
    op = conv2d("c", n=1, c=1, h=34, w=34, k=1, r=3, s=3)  # 32x32 outputs
    t = traffic(op, {"p": 8, "q": 8}, ["n", "g", "k", "c", "p", "q", "r", "s"])
    # per row of tiles: 10x10 for the first, 10x8 new columns for the next three; no overlap between rows
    assert t["X"].loads == 4 * (100 + 3 * 80)
    assert t["W"].loads == 9 and t["Y"] == Traffic(0, 32 * 32)
    assert buffer_bytes(op, {"p": 8, "q": 8}) == (100 + 9 + 64) * 2


def test_bad_tilings_are_clear_errors():
    op = matmul("mm", 8, 8, 8)
    with pytest.raises(ValueError, match="every loop dimension once"):
        traffic(op, {"m": 4}, ["m", "n"])
    with pytest.raises(ValueError, match="unknown loop dimension 'z'"):
        traffic(op, {"z": 4}, ["m", "n", "k"])


def _every_tile_footprint_bytes(op, tiles):
    """The largest scratchpad need over every real tile of the grid, the remainders included."""
    import itertools

    from loopwise.memory.polyhedral import footprint
    from loopwise.memory.tiling import tile_sizes

    size = tile_sizes(op, tiles)
    starts = [range(0, e, size[d]) for d, e in op.dims.items()]
    best = 0
    for corner in itertools.product(*starts):
        box = {d: (s, size[d]) for d, s in zip(op.dims, corner)}
        best = max(best, sum(footprint(op, t.name, box) * t.elem_bytes for t in op.tensors))
    return best


@pytest.mark.parametrize("op,tiles", [
    (matmul("mm", 96, 40, 24), {"m": 64, "n": 32}),  # two tiles each way: a full one, then the remainder
    (conv2d("c", n=1, c=2, h=10, w=10, k=2, r=3, s=3, pad=1), {"p": 6, "q": 4}),  # 6 + 4 rows; 4 + 4 + 2 columns
    (conv2d("c", n=1, c=2, h=11, w=11, k=2, r=3, s=3, stride=2, pad=1), {"p": 4}),  # 4 + 2 strided rows
])
def test_the_capacity_check_measures_the_largest_tile_not_the_remainder(op, tiles):
    assert buffer_bytes(op, tiles) == _every_tile_footprint_bytes(op, tiles)


def _append_one_row():
    """``out[i] = cat(cache, new)[i]``: a copy of a 4095-row cache grown by one row at the end (a
    decode step's grown key cache), each row 64 elements."""
    from loopwise.memory.ir import Access, Operator, Tensor

    tensors = (Tensor("cache", (4095, 64)), Tensor("new", (1, 64)), Tensor("out", (4096, 64)))
    reads = (Access("cache", ("i", "j"), "i < 4095"), Access("new", ("i - 4095", "j"), "4095 <= i < 4096"))
    return Operator("copy", {"i": 4096, "j": 64}, tensors, reads, (Access("out", ("i", "j")),))


def test_a_part_that_only_the_last_tile_reads_is_held_on_chip():
    op = _append_one_row()
    # a tile reads 512 cache rows at most; only the last one reads the new row
    assert buffer_bytes(op, {"i": 512}) == (512 + 1 + 512) * 64 * 2


def test_a_tiled_copy_of_a_grown_cache_passes_the_replay():
    from loopwise.memory.graph import Graph
    from loopwise.memory.planner import plan
    from loopwise.memory.verify import verify

    g = Graph("grow", (_append_one_row(),), frozenset(), declared_outputs=frozenset({"out"}))
    p = plan(g, 256 * 1024)
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, verdict.violations
