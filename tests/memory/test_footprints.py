"""Exact tile footprints with the polyhedral model (islpy): the numbers an accelerator compiler
engineer checks by hand, including the cases where a bounding box would be wrong."""

from __future__ import annotations

import pytest

from loopwise.memory.ir import Access, Operator, Tensor, conv2d, matmul
from loopwise.memory.polyhedral import footprint, footprint_bytes, overlap


def test_matmul_tile_reads_one_block_of_each_operand():
    op = matmul("mm", m=256, n=256, k=512)
    tile = {"m": (0, 32), "n": (0, 64), "k": (0, 128)}
    assert footprint(op, "A", tile) == 32 * 128 == 4096
    assert footprint(op, "B", tile) == 128 * 64
    assert footprint(op, "C", tile) == 32 * 64
    assert footprint_bytes(op, "A", tile) == 4096 * 2  # bf16 elements by default


def test_conv_window_reads_the_halo_once():
    # a 3x3 convolution over an 8x8 output tile (one channel) reads a 10x10 input patch
    op = conv2d("c", n=1, c=1, h=32, w=32, k=1, r=3, s=3)
    tile = {"n": (0, 1), "k": (0, 1), "c": (0, 1), "p": (0, 8), "q": (0, 8), "r": (0, 3), "s": (0, 3)}
    assert footprint(op, "X", tile) == 100
    assert footprint(op, "W", tile) == 9


def test_strided_reads_are_counted_point_by_point_not_as_a_box():
    # stride 2, 1x1 window over 7x7 outputs: 49 input points, where the bounding box holds 169
    op = conv2d("c", n=1, c=1, h=32, w=32, k=1, r=1, s=1, stride=2)
    tile = {"n": (0, 1), "k": (0, 1), "c": (0, 1), "p": (0, 7), "q": (0, 7), "r": (0, 1), "s": (0, 1)}
    assert footprint(op, "X", tile) == 49


def test_padding_clips_the_footprint_to_the_tensor():
    # 3x3, padding 1: the corner tile's window hangs over the edge, only real elements are moved
    op = conv2d("c", n=1, c=1, h=16, w=16, k=1, r=3, s=3, pad=1)
    corner = {"n": (0, 1), "k": (0, 1), "c": (0, 1), "p": (0, 4), "q": (0, 4), "r": (0, 3), "s": (0, 3)}
    assert footprint(op, "X", corner) == 5 * 5  # rows/cols -1..4 of which 0..4 exist


def test_consecutive_tiles_share_their_halo():
    op = conv2d("c", n=1, c=1, h=32, w=32, k=1, r=3, s=3)
    first = {"n": (0, 1), "k": (0, 1), "c": (0, 1), "p": (0, 8), "q": (0, 8), "r": (0, 3), "s": (0, 3)}
    second = dict(first, q=(8, 8))
    assert overlap(op, "X", first, second) == 10 * 2  # two shared input columns of ten rows


def test_a_tile_outside_the_loop_bounds_is_clipped_and_bad_input_is_a_clear_error():
    op = matmul("mm", m=40, n=40, k=40)
    assert footprint(op, "A", {"m": (32, 32), "n": (0, 8), "k": (0, 40)}) == 8 * 40
    with pytest.raises(ValueError, match="no tensor 'Z'"):
        footprint(op, "Z", {"m": (0, 1)})
    with pytest.raises(ValueError, match="unknown loop dimension 'x'"):
        footprint(op, "A", {"x": (0, 1)})
    with pytest.raises(ValueError, match="A has 2 dimensions, the access gives 1"):
        Operator("bad", {"i": 4}, (Tensor("A", (4, 4)),), reads=(Access("A", ("i",)),), writes=())


def test_a_depthwise_group_reads_only_its_own_channel():
    op = conv2d("dw", n=1, c=32, h=16, w=16, k=32, r=3, s=3, pad=1, groups=32)
    one_group = {"g": (5, 1), "p": (0, 16), "q": (0, 16)}
    assert footprint(op, "X", one_group) == 16 * 16  # channel 5, all of it (padding clipped)
    assert footprint(op, "W", one_group) == 9
    assert footprint(op, "W", {}) == 32 * 9 and op.macs == 32 * 16 * 16 * 9
    with pytest.raises(ValueError, match="do not split into 3 groups"):
        conv2d("bad", n=1, c=32, h=8, w=8, k=32, r=3, s=3, groups=3)


def test_contiguous_runs_count_the_descriptors_a_transfer_needs():
    from loopwise.memory.polyhedral import contiguous_runs

    op = matmul("mm", m=256, n=256, k=512)
    assert contiguous_runs(op, "A", {"m": (0, 32), "k": (0, 128)}) == 32  # one run per row of the tile
    assert contiguous_runs(op, "A", {"m": (0, 32)}) == 1  # whole rows: one block of memory
    conv = conv2d("c", n=1, c=1, h=32, w=32, k=1, r=1, s=1, stride=2)
    tile = {"p": (0, 4), "q": (0, 4)}
    assert contiguous_runs(conv, "X", tile) == footprint(conv, "X", tile) == 16  # stride 2: every point alone


def test_the_fast_count_agrees_with_isl_on_every_kind_of_set():
    """polyhedral.count splits a set into independent groups of variables; it must give isl's own
    count_val on boxes, strided images (existential variables), halos, unions and tile relations."""
    import islpy as isl

    from loopwise.memory.polyhedral import count, touched
    from loopwise.memory.tiling import _maps

    sets = [
        isl.Set("{ [a, b, c] : 0 <= a < 7 and 0 <= b < 5 and 0 <= c < 3 }"),
        isl.Set("{ [a, b] : 0 <= a < 10 and a <= b < a + 4 }"),
        isl.Set("{ [a, b] : 0 <= a < 9 and 0 <= b < 6 and exists e : a = 2e }"),
        isl.Set("{ [a, b] : 0 <= a < 4 and 0 <= b < 4; [a, b] : 2 <= a < 6 and 1 <= b < 3 }"),
        isl.Set("{ [a, b] : 0 <= a < 4 and 0 <= b < 4 and a + b > 100 }"),
    ]
    conv = conv2d("c", n=4, c=8, h=17, w=17, k=6, r=3, s=3, stride=2, pad=1)
    sets += [touched(conv, t, {"n": (1, 2), "p": (2, 5), "q": (0, 3)}) for t in ("X", "W", "Y")]
    for tiles in ({"n": 2, "p": 4}, {"k": 4, "c": 4, "q": 2}):
        elements, prev, _, _ = _maps(conv, tiles, list(conv.dims))
        for rel in elements.values():
            sets += [rel.wrap(), rel.subtract(prev.apply_range(rel)).wrap()]
    for s in sets:
        assert count(s) == s.count_val().to_python(), s
