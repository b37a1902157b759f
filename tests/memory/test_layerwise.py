"""The layer-by-layer baseline's tiling search: a layer that fits moves its compulsory traffic, a
big one stays within the capacity and above the lower bound, and more scratchpad never costs more."""

from __future__ import annotations

import pytest

from loopwise.memory.graph import operator_bound_bytes, operator_compulsory_bytes
from loopwise.memory.ir import conv2d, matmul
from loopwise.memory.layerwise import best_tiling


def test_an_operator_that_fits_moves_each_tensor_once():
    op = conv2d("c", n=1, c=16, h=16, w=16, k=16, r=3, s=3, pad=1)
    choice = best_tiling(op, capacity_bytes=1 << 20)
    assert choice.traffic_bytes == operator_compulsory_bytes(op) and choice.buffer_bytes <= 1 << 20


def test_a_big_matmul_fits_its_tile_and_stays_between_the_bounds():
    op = matmul("mm", 512, 512, 512)
    capacity = 64 * 1024
    choice = best_tiling(op, capacity)
    assert choice.buffer_bytes <= capacity
    naive = 512 * 512 * 2 * (2 * 512 + 1)  # every product re-reading A and B: an upper bound of sorts
    assert operator_bound_bytes(op, capacity) <= choice.traffic_bytes < naive / 10


def test_more_scratchpad_never_costs_more_traffic():
    op = conv2d("c", n=1, c=32, h=14, w=14, k=32, r=3, s=3, pad=1)
    values = [best_tiling(op, cap).traffic_bytes for cap in (4 * 1024, 16 * 1024, 64 * 1024, 1 << 20)]
    assert values == sorted(values, reverse=True) and values[-1] == operator_compulsory_bytes(op)


def test_a_scratchpad_too_small_for_one_element_is_a_clear_error():
    with pytest.raises(ValueError, match="more than 4 bytes"):
        best_tiling(matmul("mm", 8, 8, 8), capacity_bytes=4)
