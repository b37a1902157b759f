"""`loopwise memory bounds / baseline` on ZigZag's resnet18 workload, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loopwise.cli import app

zigzag = pytest.importorskip("zigzag")
RESNET18 = Path(zigzag.__file__).parent / "inputs" / "workload" / "resnet18.onnx"


@pytest.fixture(autouse=True)
def _runs_in_a_temporary_folder(tmp_path, monkeypatch):
    """``memory plan`` records a run in ./runs: each test keeps its runs in its own folder."""
    monkeypatch.chdir(tmp_path)


def test_bounds_and_the_layer_by_layer_baseline_of_resnet18():
    bounds = CliRunner().invoke(app, ["memory", "bounds", str(RESNET18), "--json"])
    assert bounds.exit_code == 0, bounds.output
    b = json.loads(bounds.output)
    assert b["operators"] == 48 and b["folded"] == ["Flatten"] and b["unsupported"] == {}
    assert b["compulsory_bytes"] == (11_684_712 + 3 * 224 * 224 + 1000) * 2
    base = CliRunner().invoke(app, ["memory", "baseline", str(RESNET18), "--json"])
    assert base.exit_code == 0, base.output
    data = json.loads(base.output)
    # with 24 MiB every resnet18 layer fits whole: layer by layer moves exactly the layer floor,
    # about twice the whole-model compulsory traffic (every intermediate out and back in)
    assert data["total_bytes"] == b["layer_by_layer_floor_bytes"]
    assert 1.9 < data["ratio_to_compulsory"] < 2.2 and len(data["operators"]) == 48


def test_bad_models_and_targets_are_one_line_errors(tmp_path):
    result = CliRunner().invoke(app, ["memory", "bounds", str(tmp_path / "none.onnx")])
    assert result.exit_code != 0 and "no such file" in str(result.exception)
    result = CliRunner().invoke(app, ["memory", "bounds", str(RESNET18), "--target", "tpu"])
    assert result.exit_code != 0 and "unknown target 'tpu'" in str(result.exception)


def test_plan_keeps_resnet18_intermediates_on_chip_at_24_mib():
    result = CliRunner().invoke(app, ["memory", "plan", str(RESNET18), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ratio_to_compulsory"] <= 1.05 and data["ratio_to_layer_by_layer"] < 0.6
    assert data["pairs_removed"] > 40 and sum(len(g["operators"]) for g in data["groups"]) == 48


@pytest.mark.slow
def test_plan_of_a_zoo_model_in_slabs_with_its_html_report(tmp_path):
    report = tmp_path / "plan.html"
    # 2 images of MobileNetV2 on a 2 MiB scratchpad: the batch does not run whole, one image does
    target = tmp_path / "small.yaml"
    target.write_text("name: small\nscratchpad: {bytes: 2097152}\ndram: {bandwidth_gbs: 100}\n")
    saved = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["memory", "plan", "zoo:mobilenet_v2", "--batch", "2", "--target", str(target),
                                      "--html", str(report), "--json", "--out", str(saved)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert json.loads(saved.read_text()) == data and data["schedule"]["capacity_bytes"] == 2097152
    assert data["run_id"]
    replay = CliRunner().invoke(app, ["memory", "verify", str(saved), "--json"])
    assert replay.exit_code == 0, replay.output
    verdict = json.loads(replay.output)
    assert verdict["ok"] and verdict["traffic_bytes"] == data["total_bytes"] and verdict["peak_bytes"] <= 2097152
    assert any(g["slab"] and g["slab"]["extent"] == 2 for g in data["groups"])
    assert data["ratio_to_layer_by_layer"] < 0.5 and all(g["peak_bytes"] <= 2097152 for g in data["groups"])
    # per operator: the plan's traffic adds up to the total, each operator at or above its own bound
    # when run alone (layer by layer), and the copies folded are counted
    ops = data["operators"]
    assert len(ops) == sum(len(g["operators"]) for g in data["groups"]) and data["copies_folded"] > 0
    assert abs(sum(o["plan_bytes"] for o in ops) - data["total_bytes"]) <= len(ops)
    assert all(o["layer_by_layer_bytes"] >= o["bound_bytes"] * 0.999 for o in ops)
    page = report.read_text()
    assert "Residency timeline" in page and "DRAM traffic per operator" in page and "slabs of 1/2" in page
    assert "<script src=" not in page  # self-contained: opens offline


def test_plan_refuses_to_print_a_plan_that_fails_its_replay(monkeypatch):
    """The planner's schedule with one load taken out: the recounted traffic no longer matches the
    plan's, so ``memory plan`` reports an error instead of the plan."""
    import loopwise.memory.planner as planner

    def without_a_load(*args):
        schedule = planner_build(*args)
        for group in schedule["groups"]:
            for d in group["dma"]:
                if d["to"] == "scratchpad":
                    group["dma"].remove(d)
                    return schedule
        return schedule

    planner_build = planner.build_schedule
    monkeypatch.setattr(planner, "build_schedule", without_a_load)
    result = CliRunner().invoke(app, ["memory", "plan", str(RESNET18), "--json"])
    assert result.exit_code != 0 and result.output == ""
    assert "fails its replay" in str(result.exception) and "traffic" in str(result.exception)


@pytest.mark.slow
def test_resnet50_at_batch_32_on_24_mib_passes_the_replay():
    """Slab groups whose outputs stay on chip for the next group: the parts already made stay for
    the rest of the loop, and the plan must fit with them."""
    result = CliRunner().invoke(app, ["memory", "plan", "zoo:resnet50", "--batch", "32", "--json"])
    assert result.exit_code == 0, str(result.exception)
    data = json.loads(result.output)
    assert all(g["peak_bytes"] <= 24 * 2**20 for g in data["groups"])
    assert data["ratio_to_compulsory"] >= 1.0


def test_an_unsupported_operator_is_said_to_count_all_its_inputs_and_outputs(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 512])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 4]) for n in ("values", "indices")],
                              initializer=[helper.make_tensor("k", TensorProto.INT64, [1], [4])])
    path = tmp_path / "topk.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    result = CliRunner().invoke(app, ["memory", "plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "counted at least at all their inputs and outputs" in text and "compulsory traffic)" not in text
    data = json.loads(CliRunner().invoke(app, ["memory", "plan", str(path), "--json"]).output)
    assert data["total_bytes"] >= (16 * 512 + 2 * 16 * 4) * 2 and data["unsupported"] == {"TopK": 1}
