"""A memory plan is a run: listed, reported, resumed without recomputing, and judged by the
verifier (a plan that fails its replay is recorded as rejected, never reported as a number)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from loopwise.cli import app


@pytest.fixture
def model(mlp_onnx):
    return mlp_onnx


def _plan(*args: str):
    return CliRunner().invoke(app, ["memory", "plan", *args])


def _events(runs, run_id: str) -> list[dict]:
    result = CliRunner().invoke(app, ["runs", "show", run_id, "--runs-dir", str(runs), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_plan_is_a_run_listed_and_reported(model, tmp_path):
    runs = tmp_path / "runs"
    result = _plan(model, "--runs-dir", str(runs), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    listed = json.loads(CliRunner().invoke(app, ["runs", "list", "--runs-dir", str(runs), "--json"]).output)
    assert [(r["run_id"], r["kind"]) for r in listed] == [(data["run_id"], "memory.plan")]
    kinds = [e["kind"] for e in _events(runs, data["run_id"])]
    assert "searched" in kinds  # the planner's search, operator by operator
    assert [k for k in kinds if k != "searched"] == ["inputs", "bounds", "candidate", "candidate", "verdict",
                                                     "verdict", "result"]
    out = tmp_path / "report.html"
    report = CliRunner().invoke(app, ["report", data["run_id"], "--runs-dir", str(runs), "--out", str(out)])
    assert report.exit_code == 0, report.output
    page = out.read_text()
    assert "Residency timeline" in page and "DRAM traffic per operator" in page and "<script src=" not in page
    assert f"{data['total_bytes'] / 1e6:,.2f}" in page and f"{data['compulsory_bytes'] / 1e6:,.2f}" in page
    assert "layer-by-layer" in page and "accepted" in page


def test_the_candidates_and_every_verdict_are_recorded(model, tmp_path):
    runs = tmp_path / "runs"
    data = json.loads(_plan(model, "--runs-dir", str(runs), "--json").output)
    events = _events(runs, data["run_id"])
    inputs = next(e["payload"] for e in events if e["kind"] == "inputs")
    assert inputs["model"] == model and inputs["target"] == "neuroncore-v2" and inputs["batch"] == 1
    bounds = next(e["payload"] for e in events if e["kind"] == "bounds")
    assert bounds["compulsory_bytes"] == data["compulsory_bytes"] and len(bounds["per_operator"]) == 3
    candidates = {e["key"]: e["payload"] for e in events if e["kind"] == "candidate"}
    assert candidates["planner"]["total_bytes"] == data["total_bytes"]
    assert candidates["layer-by-layer"]["total_bytes"] == data["layer_by_layer_bytes"]
    verdicts = {e["key"]: e["payload"] for e in events if e["kind"] == "verdict"}
    assert {k: v["status"] for k, v in verdicts.items()} == {"layer-by-layer": "accepted", "planner": "accepted"}
    assert verdicts["planner"]["traffic_bytes"] == data["total_bytes"]
    result = next(e["payload"] for e in events if e["kind"] == "result")
    assert result["status"] == "accepted" and result["total_bytes"] == data["total_bytes"]


def test_an_interrupted_run_resumes_without_recomputing(model, tmp_path, monkeypatch):
    import loopwise.memory.cli as cli
    import loopwise.memory.planner as planner
    import loopwise.memory.verify as verify

    runs = tmp_path / "runs"
    fresh = json.loads(_plan(model, "--runs-dir", str(tmp_path / "fresh"), "--json").output)
    judged = []
    real_verify = verify.verify

    def verify_then_stop(plan, graph=None):
        judged.append(plan["total_bytes"])
        if len(judged) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the planner's plan is judged
        return real_verify(plan, graph)

    monkeypatch.setattr(verify, "verify", verify_then_stop)
    stopped = _plan(model, "--runs-dir", str(runs), "--json")
    assert stopped.exit_code != 0
    assert "continue with: loopwise memory plan" in stopped.output and "--resume" in stopped.output
    run_id = json.loads(CliRunner().invoke(app, ["runs", "list", "--runs-dir", str(runs), "--json"]).output)[0]["run_id"]
    assert f"--resume {run_id}" in " ".join(stopped.output.split())
    report = CliRunner().invoke(app, ["report", run_id, "--runs-dir", str(runs)])
    assert report.exit_code == 0, report.output
    page = " ".join((runs / run_id / "report.html").read_text().split())
    assert "This run is unfinished: continue it with loopwise memory plan" in page
    assert f"--resume {run_id}" in page  # the command itself, not a placeholder

    def never(*args, **kwargs):
        raise AssertionError("recomputed on resume")

    monkeypatch.setattr(verify, "verify", lambda plan, graph=None: (judged.append(plan["total_bytes"]),
                                                                    real_verify(plan, graph))[1])
    monkeypatch.setattr(planner, "plan_with_baseline", never)
    imports = []  # the model is imported again only for the judge, which checks the plan against its graph
    real_load = cli._load
    monkeypatch.setattr(cli, "_load", lambda *args: (imports.append(args), real_load(*args))[1])
    resumed = _plan(model, "--resume", run_id, "--runs-dir", str(runs), "--json")
    assert resumed.exit_code == 0, resumed.output
    data = json.loads(resumed.output)
    assert judged[2:] == [fresh["total_bytes"]]  # only the plan not judged yet is judged
    assert len(imports) == 1
    assert data["run_id"] == run_id
    assert {k: v for k, v in data.items() if k not in ("run_id", "seconds")} == \
        {k: v for k, v in fresh.items() if k not in ("run_id", "seconds")}
    again = _plan(model, "--resume", run_id, "--runs-dir", str(runs), "--json")  # finished: nothing to do
    assert again.exit_code == 0 and json.loads(again.output) == data and len(judged) == 3 and len(imports) == 1


def test_a_plan_that_fails_its_replay_is_recorded_as_rejected(model, tmp_path, monkeypatch):
    import loopwise.memory.plan_json as plan_json

    real = plan_json.plan_json

    def without_a_load(model_name, target, plan, *args):
        data = real(model_name, target, plan, *args)
        if plan.pairs_removed:  # the planner's plan, not the baseline
            dma = next(g["dma"] for g in data["schedule"]["groups"] if any(d["to"] == "scratchpad" for d in g["dma"]))
            dma.remove(next(d for d in dma if d["to"] == "scratchpad"))
        return data

    monkeypatch.setattr(plan_json, "plan_json", without_a_load)
    runs = tmp_path / "runs"
    result = _plan(model, "--runs-dir", str(runs), "--json")
    assert result.exit_code != 0 and result.output == ""
    message = str(result.exception)
    assert "fails its replay" in message and "traffic" in message and "rejected" in message
    run_id = json.loads(CliRunner().invoke(app, ["runs", "list", "--runs-dir", str(runs), "--json"]).output)[0]["run_id"]
    events = _events(runs, run_id)
    verdicts = {e["key"]: e["payload"] for e in events if e["kind"] == "verdict"}
    assert verdicts["planner"]["status"] == "rejected" and verdicts["layer-by-layer"]["status"] == "accepted"
    assert any(v["kind"] == "traffic" for v in verdicts["planner"]["violations"])
    result = next(e["payload"] for e in events if e["kind"] == "result")
    assert result["status"] == "rejected" and result["plan"] is None and result["total_bytes"] is None
    out = tmp_path / "report.html"
    assert CliRunner().invoke(app, ["report", run_id, "--runs-dir", str(runs), "--out", str(out)]).exit_code == 0
    page = out.read_text()
    assert "recorded as rejected" in page and "Residency timeline" not in page


def test_bad_model_target_and_run_id_are_one_line_errors(model, tmp_path):
    runs = tmp_path / "runs"
    result = _plan(str(tmp_path / "none.onnx"), "--runs-dir", str(runs))
    assert result.exit_code != 0 and "no such file" in str(result.exception)
    assert not runs.exists()  # no run for a model that does not load
    result = _plan(model, "--target", "tpu", "--runs-dir", str(runs))
    assert result.exit_code != 0 and "unknown target 'tpu'" in str(result.exception)
    result = _plan(model, "--resume", "nope", "--runs-dir", str(runs))
    assert result.exit_code != 0 and "no run 'nope'" in str(result.exception)
    data = json.loads(_plan(model, "--runs-dir", str(runs), "--json").output)
    result = _plan("zoo:resnet50", "--resume", data["run_id"], "--runs-dir", str(runs))
    assert result.exit_code != 0 and f"plans {model}" in str(result.exception)


def test_a_search_stopped_part_way_continues_at_the_first_operator_not_searched(model, tmp_path, monkeypatch):
    from loopwise.memory.planner import _Planner

    fresh = json.loads(_plan(model, "--runs-dir", str(tmp_path / "fresh"), "--json").output)
    searched = []
    real = _Planner.candidates

    def candidates(self, i):
        searched.append(i)
        if searched == [0, 1, 2]:
            raise KeyboardInterrupt  # Ctrl-C while the third operator is searched
        return real(self, i)

    monkeypatch.setattr(_Planner, "candidates", candidates)
    runs = tmp_path / "runs"
    stopped = _plan(model, "--runs-dir", str(runs), "--json")
    assert stopped.exit_code != 0 and "continue with:" in stopped.output
    run_id = json.loads(CliRunner().invoke(app, ["runs", "list", "--runs-dir", str(runs), "--json"]).output)[0]["run_id"]
    resumed = _plan(model, "--resume", run_id, "--runs-dir", str(runs), "--json")
    assert resumed.exit_code == 0, resumed.output
    assert searched == [0, 1, 2, 2]  # operators 0 and 1 come back from the run, not from a new search
    data = json.loads(resumed.output)
    assert {k: v for k, v in data.items() if k not in ("run_id", "seconds")} == \
        {k: v for k, v in fresh.items() if k not in ("run_id", "seconds")}
