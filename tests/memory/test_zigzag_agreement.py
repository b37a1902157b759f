"""Layer by layer, loopwise and ZigZag agree on the DRAM traffic of ResNet-18 and MobileNetV2 on the
same 24 MiB hierarchy (the issue asks for 2%; with every layer fitting, both count each operand
exactly once, so this is where a misread stride, padding or group shows). ZigZag's side is the
recording in fixtures/zigzag_layers.json (tests/memory/record_zigzag.py; ZigZag takes about three
minutes over both networks, ResNet-18 most of it) while the installed zigzag-dse is the recorded
version, and ZigZag itself otherwise. The command runs ZigZag itself on a three-layer model made
here (a convolution, a strided depthwise one, a pointwise one: about ten seconds) and on
MobileNetV2 from the recording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loopwise.cli import app
from loopwise.memory.targets import load_target

zigzag = pytest.importorskip("zigzag")
pytest.importorskip("six")  # zigzag imports it without declaring it
WORKLOADS = Path(zigzag.__file__).parent / "inputs" / "workload"
RECORDED = json.loads((Path(__file__).parent / "fixtures" / "zigzag_layers.json").read_text())


def _recording_holds() -> bool:
    from importlib.metadata import version

    return RECORDED["zigzag_dse"] == version("zigzag-dse")


@pytest.mark.parametrize("net,layers", [("resnet18", 21), ("mobilenetv2", 53)])
def test_per_layer_dram_traffic_agrees_with_zigzag_within_2_percent(net, layers, monkeypatch):
    from loopwise.memory import zigzag_compare

    if _recording_holds():
        monkeypatch.setattr(zigzag_compare, "run_zigzag", lambda *args: RECORDED["models"][net])
    rows = zigzag_compare.compare(WORKLOADS / f"{net}.onnx", load_target(RECORDED["target"]),
                                  RECORDED["elem_bytes"], RECORDED["lpf_limit"])
    assert len(rows) == layers
    for r in rows:
        assert set(r.zigzag_elements) == set(r.loopwise_elements) == {"I", "W", "O"}
        assert abs(r.ratio - 1) <= 0.02, (r.layer, r.zigzag_elements, r.loopwise_elements)


def _three_layer_model(path: Path) -> Path:
    """A 3x3 convolution (16 -> 32 channels, 28 x 28), ReLU, a strided 3x3 depthwise convolution
    and a pointwise one: the kinds of layer MobileNetV2 is made of, small enough for ZigZag to
    map in seconds."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = [numpy_helper.from_array(np.zeros(shape, np.float32), name)
               for name, shape in (("w1", (32, 16, 3, 3)), ("w2", (32, 1, 3, 3)), ("w3", (32, 32, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Conv", ["b", "w2"], ["c"], name="depthwise", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              group=32, strides=[2, 2]),
             helper.make_node("Conv", ["c", "w3"], ["y"], name="pointwise", kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "three_layers",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return path


def test_compare_command_runs_zigzag_itself_and_agrees_layer_by_layer(tmp_path):
    model = _three_layer_model(tmp_path / "three_layers.onnx")
    result = CliRunner().invoke(app, ["memory", "compare", str(model), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["layer"] for r in data["rows"]] == ["conv", "depthwise", "pointwise"]
    assert data["worst_layer_deviation"] <= 0.02
    # every operand of every layer once: 16x28x28 in, 32x16x3x3 weights, 32x28x28 out, and so on
    assert data["rows"][0]["zigzag"] == {"I": 16 * 28 * 28, "W": 32 * 16 * 9, "O": 32 * 28 * 28}


def test_compare_command_reports_every_layer_and_the_whole_model_plan(monkeypatch):
    from loopwise.memory import zigzag_compare

    if _recording_holds():  # ZigZag's answer for MobileNetV2 as recorded with this zigzag-dse
        monkeypatch.setattr(zigzag_compare, "run_zigzag", lambda *args: RECORDED["models"]["mobilenetv2"])
    result = CliRunner().invoke(app, ["memory", "compare", str(WORKLOADS / "mobilenetv2.onnx"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["layers"] == 53 and data["worst_layer_deviation"] <= 0.02
    assert {r["layer"]: r["zigzag"] for r in data["rows"]} == RECORDED["models"]["mobilenetv2"]
    # ZigZag sends every layer's tensors through DRAM; the plan keeps MobileNetV2's intermediates on chip
    assert data["loopwise_plan_bytes_all_operators"] < data["zigzag_elements"] * 2  # bf16: 2 bytes an element


def test_compare_needs_an_onnx_file_and_a_known_tool(tmp_path):
    result = CliRunner().invoke(app, ["memory", "compare", str(tmp_path / "x.onnx")])
    assert result.exit_code != 0 and "existing ONNX model" in str(result.exception)
    result = CliRunner().invoke(app, ["memory", "compare", str(WORKLOADS / "resnet18.onnx"), "--with", "timeloop"])
    assert result.exit_code != 0 and "only zigzag" in str(result.exception)
