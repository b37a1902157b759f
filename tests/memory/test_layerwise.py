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


def test_a_layer_whose_input_fits_beside_a_weight_column_block_reads_its_input_once():
    """ConvNeXt-T's stage-3 fc1 (196 x 384 -> 1536, bf16) on a 227 KiB scratchpad: holding the whole
    input and streaming the weights by column blocks fits, so every operand moves once (what
    ZigZag's mapping does). Reaching it takes a size that is no power of two and two dimensions
    moved together (the reduction grown to whole while the columns shrink)."""
    from loopwise.memory.tiling import traffic

    op = matmul("fc1", 196, 1536, 384)
    choice = best_tiling(op, 232448)
    moved = traffic(op, choice.tiles, list(choice.order))
    assert moved["A"].loads == 196 * 384, choice
    assert choice.traffic_bytes == operator_compulsory_bytes(op) and choice.buffer_bytes <= 232448



def test_a_stationary_input_far_from_the_first_fitting_tiling_is_found():
    """ConvNeXt-T's stage-4 fc1 (49 x 768 -> 3072) on 227 KiB: the first tiling that fits keeps half
    the output columns and a sliver of the reduction (the input read twice); holding the whole input
    with 96 columns at a time is many steps away in both dimensions and moves every operand once."""
    op = matmul("fc1", 49, 3072, 768)
    choice = best_tiling(op, 232448)
    assert choice.traffic_bytes == operator_compulsory_bytes(op) and choice.buffer_bytes <= 232448

@pytest.mark.slow
@pytest.mark.parametrize("op,capacity", [(matmul("mm", 40, 96, 24), 3000), (matmul("mm", 36, 20, 50), 2400)])
def test_the_search_finds_the_best_tiling_of_an_exhaustive_enumeration(op, capacity):
    """Small products whose every tiling (each dimension's divisors, halvings and powers of two, in
    every order the search uses) can be enumerated: the search ends at the least traffic of them all."""
    import itertools

    from loopwise.memory.layerwise import candidate_sizes, tile_orders
    from loopwise.memory.tiling import buffer_bytes, traffic_bytes

    best = min(traffic_bytes(op, tiles, list(order))
               for sizes in itertools.product(*(candidate_sizes(e) for e in op.dims.values()))
               if buffer_bytes(op, tiles := dict(zip(op.dims, sizes))) <= capacity
               for order in tile_orders(op))
    assert best_tiling(op, capacity).traffic_bytes == best


def test_identical_operators_under_other_names_get_the_same_tiling():
    a, b = matmul("first", 196, 1536, 384), matmul("second", 196, 1536, 384)
    ca, cb = best_tiling(a, 232448), best_tiling(b, 232448)
    assert cb.operator == "second" and (ca.tiles, ca.order, ca.traffic_bytes) == (cb.tiles, cb.order, cb.traffic_bytes)
