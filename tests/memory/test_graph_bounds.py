"""Whole-model bounds: what a layer-at-a-time schedule must move against what the whole model must."""

from __future__ import annotations

import math

import pytest

from loopwise.memory.graph import Graph, operator_bound_bytes
from loopwise.memory.ir import conv2d, elementwise, matmul


def _chain() -> Graph:
    conv1 = conv2d("conv1", n=1, c=3, h=32, w=32, k=16, r=3, s=3, pad=1, tensors=("x", "w1", "y1"))
    relu = elementwise("relu", (1, 16, 32, 32), ("y1",), "z1")
    conv2 = conv2d("conv2", n=1, c=16, h=32, w=32, k=8, r=3, s=3, pad=1, tensors=("z1", "w2", "y2"))
    return Graph("chain", (conv1, relu, conv2), frozenset({"w1", "w2"}))


def test_roles_of_the_tensors():
    g = _chain()
    assert g.inputs() == ["x"] and g.outputs() == ["y2"] and g.intermediates() == ["y1", "z1"]


def test_compulsory_bound_counts_weights_inputs_and_outputs_once():
    g = _chain()
    x, y1, y2 = 3 * 32 * 32 * 2, 16 * 32 * 32 * 2, 8 * 32 * 32 * 2
    w1, w2 = 16 * 3 * 9 * 2, 8 * 16 * 9 * 2
    assert g.compulsory_bytes() == w1 + w2 + x + y2
    # layer by layer, each intermediate is written and read back: y1 and z1 twice each
    assert g.layer_by_layer_floor_bytes() == (x + w1 + y1) + (y1 + y1) + (y1 + w2 + y2)
    assert g.layer_by_layer_floor_bytes() - g.compulsory_bytes() == 4 * y1


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
