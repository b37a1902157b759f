"""Layer by layer, loopwise and ZigZag agree on the DRAM traffic of ResNet-18 and MobileNetV2 on the
same 24 MiB hierarchy (the issue asks for 2%; with every layer fitting, both count each operand
exactly once, so this is where a misread stride, padding or group shows). ZigZag's side is the
recording in fixtures/zigzag_layers.json (tests/memory/record_zigzag.py; ZigZag takes about three
minutes over both networks, ResNet-18 most of it) while the installed zigzag-dse is the recorded
version, and ZigZag itself otherwise; the command test runs ZigZag on MobileNetV2 and checks that
it still says what the recording says."""

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


def test_compare_command_reports_every_layer_and_the_whole_model_plan():
    result = CliRunner().invoke(app, ["memory", "compare", str(WORKLOADS / "mobilenetv2.onnx"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["layers"] == 53 and data["worst_layer_deviation"] <= 0.02
    if _recording_holds():  # ZigZag, run now, says what the recording says
        assert {r["layer"]: r["zigzag"] for r in data["rows"]} == RECORDED["models"]["mobilenetv2"]
    # ZigZag sends every layer's tensors through DRAM; the plan keeps MobileNetV2's intermediates on chip
    assert data["loopwise_plan_bytes_all_operators"] < data["zigzag_elements"] * 2  # bf16: 2 bytes an element


def test_compare_needs_an_onnx_file_and_a_known_tool(tmp_path):
    result = CliRunner().invoke(app, ["memory", "compare", str(tmp_path / "x.onnx")])
    assert result.exit_code != 0 and "existing ONNX model" in str(result.exception)
    result = CliRunner().invoke(app, ["memory", "compare", str(WORKLOADS / "resnet18.onnx"), "--with", "timeloop"])
    assert result.exit_code != 0 and "only zigzag" in str(result.exception)
