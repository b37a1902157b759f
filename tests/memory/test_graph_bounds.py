"""Whole-model bounds: what a layer-at-a-time schedule must move against what the whole model must."""

from __future__ import annotations

import math

import pytest

from loopwise.memory.graph import Graph, operator_bound_bytes
from loopwise.memory.ir import elementwise, matmul


def test_roles_of_the_tensors(chain):
    assert chain.inputs() == ["x"] and chain.outputs() == ["y2"] and chain.intermediates() == ["y1", "z1"]


def test_compulsory_bound_counts_weights_inputs_and_outputs_once(chain):
    x, y1, y2 = 3 * 32 * 32 * 2, 16 * 32 * 32 * 2, 8 * 32 * 32 * 2
    w1, w2 = 16 * 3 * 9 * 2, 8 * 16 * 9 * 2
    assert chain.compulsory_bytes() == w1 + w2 + x + y2
    # layer by layer, each intermediate is written and read back: y1 and z1 twice each
    assert chain.layer_by_layer_floor_bytes() == (x + w1 + y1) + (y1 + y1) + (y1 + w2 + y2)
    assert chain.layer_by_layer_floor_bytes() - chain.compulsory_bytes() == 4 * y1


def test_operator_bound_is_hong_kung_for_a_big_matmul_and_compulsory_for_a_small_one():
    big = matmul("big", 16384, 16384, 16384)  # a 4096 cube is still compulsory-bound at 24 MiB
    s = 24 * 2**20  # 24 MiB scratchpad, bf16
    assert operator_bound_bytes(big, s) == int(16384**3 / math.sqrt(s / 2) * 2) > 3 * 16384**2 * 2
    small = matmul("small", 64, 64, 64)
    assert operator_bound_bytes(small, s) == 3 * 64 * 64 * 2
    with pytest.raises(ValueError, match="at least one byte"):
        operator_bound_bytes(small, 0)


def test_inconsistent_tensors_are_refused():
    a = elementwise("a", (4, 4), ("x",), "y")
    b = elementwise("b", (8,), ("y",), "z")
    with pytest.raises(ValueError, match="tensor y is"):
        Graph("bad", (a, b))
    with pytest.raises(ValueError, match="weights q are not tensors"):
        Graph("bad", (a,), frozenset({"q"}))
