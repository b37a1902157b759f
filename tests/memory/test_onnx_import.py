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
