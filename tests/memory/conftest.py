"""Shared model of the memory tests: conv -> relu -> conv, the smallest chain with intermediates."""

from __future__ import annotations

import pytest

from loopwise.memory.graph import Graph
from loopwise.memory.ir import conv2d, elementwise


@pytest.fixture
def chain() -> Graph:
    """x -(conv1, w1)-> y1 -(relu)-> z1 -(conv2, w2)-> y2, 32x32 maps, bf16."""
    conv1 = conv2d("conv1", n=1, c=3, h=32, w=32, k=16, r=3, s=3, pad=1, tensors=("x", "w1", "y1"))
    relu = elementwise("relu", (1, 16, 32, 32), ("y1",), "z1")
    conv2 = conv2d("conv2", n=1, c=16, h=32, w=32, k=8, r=3, s=3, pad=1, tensors=("z1", "w2", "y2"))
    return Graph("chain", (conv1, relu, conv2), frozenset({"w1", "w2"}))
