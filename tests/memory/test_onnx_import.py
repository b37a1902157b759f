"""ONNX models into the memory IR: the two workloads ZigZag ships (weight-stripped resnet18 and
mobilenetv2 in the zigzag-dse wheel), every operator accounted for, copies folded away."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from loopwise.errors import UserError
from loopwise.memory.onnx_import import load_onnx
from loopwise.memory.polyhedral import footprint

zigzag = pytest.importorskip("zigzag")
WORKLOADS = Path(zigzag.__file__).parent / "inputs" / "workload"


def test_resnet18_imports_with_its_operators_and_parameters():
    imported = load_onnx(WORKLOADS / "resnet18.onnx")
    g = imported.graph
    kinds = [op.name.split(":")[0] for op in g.operators]
    assert {k: kinds.count(k) for k in set(kinds)} == {"Conv": 20, "Relu": 17, "Add": 8, "MaxPool": 1,
                                                       "GlobalAveragePool": 1, "Gemm": 1}
    assert imported.folded == ["Flatten"] and imported.unsupported == {}
    params = sum(math.prod(g.tensors()[w].shape) for w in g.weights)
    # torchvision's resnet18 has 11,689,512 parameters; the export folds each BatchNorm (2 per channel)
    # into its convolution's bias (1 per channel): 4,800 channels of BatchNorm fewer
    assert params == 11_689_512 - 4_800
    assert [imported.names[t] for t in g.inputs()] == ["input.1"]
    assert [imported.names[t] for t in g.outputs()] == ["191"]
    assert g.compulsory_bytes() == (params + 3 * 224 * 224 + 1000) * 2  # bf16 elements


def test_the_flatten_before_the_classifier_is_folded_into_its_read():
    g = load_onnx(WORKLOADS / "resnet18.onnx").graph
    gemm = next(op for op in g.operators if op.name.startswith("Gemm"))
    (pooled,) = [a for a in gemm.reads if len(g.tensors()[a.tensor].shape) == 4]
    assert g.tensors()[pooled.tensor].shape == (1, 512, 1, 1)  # the Gemm reads the pooled tensor itself
    assert footprint(gemm, pooled.tensor, {}) == 512


def test_mobilenet_v2_depthwise_convolutions_keep_their_groups():
    g = load_onnx(WORKLOADS / "mobilenetv2.onnx").graph
    convs = [op for op in g.operators if op.name.startswith("Conv")]
    assert len(convs) == 52
    depthwise = [op for op in convs if op.dims["g"] > 1]
    assert depthwise and all(op.dims["c"] == 1 and op.dims["k"] == 1 for op in depthwise)
    assert sum(op.name.startswith("Clip") for op in g.operators) == 35


def test_a_file_that_is_not_onnx_is_a_one_line_error(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_text("not a model")
    with pytest.raises(UserError, match="model.onnx"):
        load_onnx(bad)
    with pytest.raises(UserError, match="no such file"):
        load_onnx(tmp_path / "missing.onnx")


def _model(tmp_path, nodes, inputs, outputs, inits=()):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              initializer=list(inits))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_copies_attention_and_transposed_convolutions_import_without_unsupported_operators(tmp_path):
    from onnx import TensorProto, helper

    ints = lambda name, vals: helper.make_tensor(name, TensorProto.INT64, [len(vals)], vals)  # noqa: E731
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),  # [1, 8, 4] -> [1, 4, 8]
        helper.make_node("Slice", ["xt", "st", "en", "ax"], ["xs"]),  # columns 2..5 of xt: [1, 4, 4]
        helper.make_node("Concat", ["xs", "y"], ["xc"], axis=1),  # [1, 4 + 2, 4]
        helper.make_node("Pad", ["xc", "pads"], ["xp"], mode="constant"),  # [1, 6, 6]: a column of zeros each side
        helper.make_node("MatMul", ["xp", "xp"], ["s"]),  # batched [1, 6, 6] x [1, 6, 6]
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("LayerNormalization", ["p", "gamma", "beta"], ["ln"], axis=-1),
        helper.make_node("ConvTranspose", ["img", "w"], ["up"], strides=[2, 2], pads=[1, 1, 1, 1]),
    ]
    inits = [ints("st", [2]), ints("en", [6]), ints("ax", [2]), ints("pads", [0, 0, 1, 0, 0, 1]),
             helper.make_tensor("gamma", TensorProto.FLOAT, [6], [1.0] * 6),
             helper.make_tensor("beta", TensorProto.FLOAT, [6], [0.0] * 6),
             helper.make_tensor("w", TensorProto.FLOAT, [3, 2, 4, 4], [0.0] * 96)]
    path = _model(tmp_path, nodes, [("x", [1, 8, 4]), ("y", [1, 2, 4]), ("img", [1, 3, 5, 5])],
                  [("ln", [1, 6, 6]), ("up", [1, 2, 10, 10])], inits)
    imported = load_onnx(path)
    g = imported.graph
    assert imported.unsupported == {}
    assert {"Transpose", "Slice", "Concat", "Pad"} <= set(imported.folded)
    mm = next(op for op in g.operators if op.name.startswith("MatMul"))
    # the product reads x's columns 2..5 (4 rows each) and all of y; the padding is no element
    assert footprint(mm, "x", {}) == 4 * 4 and footprint(mm, "y", {}) == 2 * 4
    softmax = next(op for op in g.operators if op.name.startswith("Softmax"))
    assert softmax.coupled == {"d2"}
    up = next(op for op in g.operators if op.name.startswith("ConvTranspose"))
    assert footprint(up, "up", {}) == 2 * 10 * 10 and up.macs == 3 * 2 * 25 * 16


def test_a_reshape_to_a_shape_computed_from_shape_ops_imports_with_static_shapes(tmp_path):
    """The classic exporter writes ``x.reshape(x.shape[0], -1, 8)`` as Shape -> Gather -> Unsqueeze ->
    Concat -> Reshape: the target shape is data, known only when shape inference propagates it."""
    from onnx import TensorProto, helper

    ints = lambda name, vals: helper.make_tensor(name, TensorProto.INT64, [len(vals)], vals)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["xr"]),  # [2, 4, 16] -> [2, 8, 8]
        helper.make_node("Relu", ["xr"], ["y"]),
    ]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]), ints("axes", [0]), ints("rest", [-1, 8])]
    path = _model(tmp_path, nodes, [("x", [2, 4, 16])], [("y", [2, 8, 8])], inits)
    imported = load_onnx(path)
    (relu,) = [op for op in imported.graph.operators if op.name.startswith("Relu")]
    assert relu.dims == {"d0": 2, "d1": 8, "d2": 8} and relu.tensor("x").shape == (2, 4, 16)
    assert "Reshape" in imported.folded and imported.graph.compulsory_bytes() == 2 * (2 * 64 + 2 * 64)


def test_a_graph_output_made_by_a_concat_is_stored_whole(tmp_path):
    """The updated key cache of a decode step is a Concat of the past keys and the new ones, and
    a graph output: every element of it goes to DRAM."""
    from onnx import helper

    nodes = [helper.make_node("Relu", ["k"], ["knew"]),
             helper.make_node("Concat", ["past", "knew"], ["cache"], axis=1),
             helper.make_node("Relu", ["cache"], ["y"])]  # the cache is also read inside the model
    path = _model(tmp_path, nodes, [("k", [1, 1, 8]), ("past", [1, 16, 8])], [("cache", [1, 17, 8]), ("y", [1, 17, 8])])
    g = load_onnx(path).graph
    assert sorted(g.nbytes(t) for t in g.outputs()) == [17 * 8 * 2, 17 * 8 * 2]
    assert g.compulsory_bytes() == (8 + 16 * 8 + 2 * 17 * 8) * 2


def test_a_flattened_graph_output_is_its_producer_stored_without_a_copy(tmp_path):
    from onnx import helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Flatten", ["r"], ["y"], axis=1)]
    g = load_onnx(_model(tmp_path, nodes, [("x", [2, 3, 4])], [("y", [2, 12])])).graph
    assert len(g.operators) == 1 and g.compulsory_bytes() == 2 * 2 * 24


@pytest.mark.parametrize("opset,keep", [(17, 1), (18, 0)])
def test_reduce_mean_is_a_reduction_reading_its_whole_input(tmp_path, opset, keep):
    """The mean of RMSNorm over [1, 2048, 4096]: every input element is read (axes as an attribute
    before opset 18, as an input from it)."""
    import onnx
    from onnx import TensorProto, helper

    axes = {"axes": [-1]} if opset < 18 else {}
    inputs = ["x"] if opset < 18 else ["x", "ax"]
    node = helper.make_node("ReduceMean", inputs, ["m"], keepdims=keep, **axes)
    out = [1, 2048, 1] if keep else [1, 2048]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048, 4096])],
                              [helper.make_tensor_value_info("m", TensorProto.FLOAT, out)],
                              initializer=[helper.make_tensor("ax", TensorProto.INT64, [1], [-1])] if opset >= 18 else [])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    imported = load_onnx(path)
    g = imported.graph
    (mean,) = g.operators
    assert imported.unsupported == {} and mean.dims == {"d0": 1, "d1": 2048, "d2": 4096}
    assert footprint(mean, "x", {}) == 2048 * 4096
    assert g.compulsory_bytes() == (2048 * 4096 + 2048) * 2


def test_an_operator_without_a_model_is_counted_at_all_its_inputs_and_outputs(tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1)]  # 4 largest of 512 per row
    path = _model(tmp_path, nodes, [("x", [1, 16, 512])], [("values", [1, 16, 4]), ("indices", [1, 16, 4])],
                  [helper.make_tensor("k", TensorProto.INT64, [1], [4])])
    imported = load_onnx(path)
    g = imported.graph
    assert imported.unsupported == {"TopK": 1}
    (topk,) = g.operators
    assert footprint(topk, "x", {}) == 16 * 512
    assert g.compulsory_bytes() == (16 * 512 + 2 * 16 * 4 + 1) * 2  # and k, a one-element input
