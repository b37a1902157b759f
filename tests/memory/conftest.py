"""Shared models of the memory tests: conv -> relu -> conv, the smallest chain with intermediates, and
an ONNX MLP file for the command-line tests."""

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


@pytest.fixture
def mlp_onnx(tmp_path) -> str:
    """x[1, 64, 256] -> MatMul -> Relu -> MatMul -> y: three operators, two intermediates, as an ONNX file."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    weights = [helper.make_tensor_value_info("w1", TensorProto.FLOAT, [256, 256]),
               helper.make_tensor_value_info("w2", TensorProto.FLOAT, [256, 128])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 256]),
                                             *weights],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 128])])
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)
