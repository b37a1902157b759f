"""bench/smollm2_study.py accumulates one study over several runs: a killed run's rows resume where
they stopped, the budget is calibrated once, settings that differ from the rows' are refused, and
the summary is rewritten over every finished seed. The comparisons are a stand-in (rewards from a
formula) so that only the study's bookkeeping runs; one test runs the real engine on a tiny model."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from bench_modules import bench_module

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "2026-12-04-smollm2-study.json"


def _reward(task: str, seed: int, method: str) -> float:
    return round(0.1 * (len(method) % 4) + 0.03 * seed + (0.2 if task.endswith("counting") else 0.0), 4)


class StandIn:
    """The study's comparison, calibration and model read, recording what it was asked; the
    ``kill_at``-th comparison raises KeyboardInterrupt as a killed process stops."""

    def __init__(self, kill_at: int | None = None, seconds: float = 1.0) -> None:
        self.calls: list[tuple[str, int, int]] = []
        self.methods: list[tuple[str, ...]] = []
        self.base = lambda seed: 0.25 + 0.01 * seed  # the base's tuning reward: one per seed
        self.calibrated = 0
        self.kill_at, self.seconds = kill_at, seconds

    def comparison(self, settings, device, task, difficulty, seed, runs_dir, methods):
        self.calls.append((task, difficulty, seed))
        self.methods.append(tuple(methods))
        if len(self.calls) == self.kill_at:
            raise KeyboardInterrupt
        common = {"task": task, "difficulty": difficulty, "seed": seed, "device": device,
                  "preset": settings.preset, "policy": settings.policy}
        return [{"kind": "comparison", **common, "seconds": self.seconds, "base_tune_reward": self.base(seed),
                 "stages": [{"method": m} for m in methods]}] + [
            {"kind": "method", **common, "method": m, "test_reward": _reward(task, seed, m),
             "samples": 64 * settings.budget_stages} for m in methods]

    def calibrate(self, settings, device, task, difficulty):
        self.calibrated += 1
        return 1.0


@pytest.fixture
def study(monkeypatch):
    module = bench_module("smollm2_study")
    stand_in = StandIn()
    monkeypatch.setattr(module, "_comparison", lambda *a: stand_in.comparison(*a))
    monkeypatch.setattr(module, "_calibrate", lambda *a: stand_in.calibrate(*a))
    monkeypatch.setattr(module, "_read_model", lambda policy: 0.0)
    module.stand_in = stand_in
    return module


def _rows(path) -> list[dict]:
    return json.loads(Path(path).read_text())


def _kinds(rows, kind) -> list[dict]:
    return [r for r in rows if r["kind"] == kind]


ARGS = ["--device", "cpu", "--methods", "tree,fixed,grid", "--tasks", "chat:arithmetic@1,chat:rg:letter_counting@0"]


def test_a_killed_study_resumes_where_it_stopped_and_summarizes_every_seed(study, tmp_path):
    out = tmp_path / "study.json"
    study.stand_in.kill_at = 4  # seed 1's second task
    with pytest.raises(KeyboardInterrupt):
        study.main([*ARGS, "--seeds", "0-2", "--out", str(out)])
    partial = _rows(out)
    assert {(r["task"], r["seed"]) for r in _kinds(partial, "comparison")} == {
        ("chat:arithmetic", 0), ("chat:rg:letter_counting", 0), ("chat:arithmetic", 1)}
    budget = _kinds(partial, "settings")[0]["budget_stages"]
    assert study.stand_in.calibrated == 1 and budget >= 2

    study.stand_in.calls.clear()
    assert study.main(["--resume", str(out), "--seeds", "0-2", "--device", "cpu",
                       "--tasks", "chat:arithmetic@1,chat:rg:letter_counting@0"]) == 0
    assert study.stand_in.calls == [("chat:rg:letter_counting", 0, 1), ("chat:arithmetic", 1, 2),
                                    ("chat:rg:letter_counting", 0, 2)]
    assert study.stand_in.calibrated == 1  # the budget stays the rows'
    rows = _rows(out)
    assert len(_kinds(rows, "meta")) == 2 and len(_kinds(rows, "settings")) == 1
    pairs = [(r["task"], r["seed"]) for r in _kinds(rows, "comparison")]
    assert len(pairs) == len(set(pairs)) == 6
    assert {r["samples"] for r in _kinds(rows, "method")} == {64 * budget}
    summary = {(r["task"], r["method"]): r for r in _kinds(rows, "summary")}
    assert len(summary) == 6
    for (task, method), row in summary.items():
        assert row["seeds"] == 3 and row["seed_list"] == [0, 1, 2]
        tests = [_reward(task, s, method) for s in range(3)]
        assert row["test"]["mean"] == pytest.approx(statistics.mean(tests))
        if method != "tree":
            gaps = [_reward(task, s, "tree") - _reward(task, s, method) for s in range(3)]
            assert row["versus_tree"]["mean"] == pytest.approx(statistics.mean(gaps))
            assert row["versus_tree"]["n"] == 3 and math.isfinite(row["versus_tree"]["low"])


def test_a_study_run_a_method_at_a_time_resumes_inside_a_comparison(study, tmp_path, capsys):
    """--by-method: a comparison longer than one call is run a method at a time; a killed call
    keeps the methods it finished, the next runs only the rest, and the comparison counts in the
    summary only when its last method is in."""
    out = tmp_path / "study.json"
    args = [*ARGS, "--tasks", "chat:arithmetic@1", "--seeds", "0-1", "--budget-stages", "8", "--by-method"]
    study.stand_in.kill_at = 3  # seed 0's third method
    with pytest.raises(KeyboardInterrupt):
        study.main([*args, "--out", str(out)])
    partial = _rows(out)
    assert [r["methods"] for r in _kinds(partial, "part")] == [["tree"], ["fixed"]]
    assert not _kinds(partial, "comparison") and not _kinds(partial, "summary")

    study.stand_in.calls.clear()
    study.stand_in.methods.clear()
    study.stand_in.kill_at, study.stand_in.seconds = None, 300.0
    assert study.main(["--resume", str(out), "--device", "cpu", "--tasks", "chat:arithmetic@1", "--seeds", "0-1",
                       "--by-method", "--time-budget", "250"]) == 0
    assert study.stand_in.methods == [("grid",)]  # then a method is estimated at 300 s: past 250 s
    assert "seed 1 tree would end past 250 s" in capsys.readouterr().out
    rows = _rows(out)
    [comparison] = _kinds(rows, "comparison")
    assert (comparison["seed"], comparison["parts"], comparison["seconds"]) == (0, 3, 302.0)
    assert [st["method"] for st in comparison["stages"]] == ["tree", "fixed", "grid"]
    assert {r["seeds"] for r in _kinds(rows, "summary")} == {1}

    assert study.main(["--resume", str(out), "--device", "cpu", "--tasks", "chat:arithmetic@1", "--seeds", "0-1",
                       "--by-method", "--time-budget", "1000"]) == 0
    assert study.stand_in.methods == [("grid",), ("tree",), ("fixed",), ("grid",)]
    assert "3 method(s) run here, 1 comparison(s) finished, 0 of these tasks and seeds left" in capsys.readouterr().out
    rows = _rows(out)
    assert [r["seed"] for r in _kinds(rows, "comparison")] == [0, 1]
    assert {r["seeds"] for r in _kinds(rows, "summary")} == {2}


def test_parts_of_a_comparison_from_different_bases_are_not_merged():
    rows_module = bench_module("study_rows")
    part = {"kind": "part", "task": "t", "seed": 0, "seconds": 1.0, "base_tune_reward": 0.25, "stages": []}
    rows = [{**part, "methods": ["tree"]}, {**part, "methods": ["fixed"], "base_tune_reward": 0.5}]
    with pytest.raises(rows_module.StudyError, match="started from different bases"):
        rows_module.merged_comparison(rows, "t", 0)
    assert rows_module.merged_comparison(rows[:1] * 2, "t", 0)["seconds"] == 2.0


@pytest.mark.parametrize("change, named", [
    (["--methods", "tree,fixed"], "methods: tree,fixed,grid -> tree,fixed"),
    (["--budget-stages", "5"], "budget_stages: 3 -> 5"),
    (["--preset", "small"], "preset: lm -> small"),
    (["--tasks", "chat:arithmetic@2"], "chat:arithmetic: 1 -> 2"),
])
def test_settings_that_differ_from_the_resumed_rows_are_refused(study, tmp_path, capsys, change, named):
    out = tmp_path / "study.json"
    assert study.main([*ARGS, "--budget-stages", "3", "--seeds", "0", "--out", str(out)]) == 0
    before = out.read_text()
    study.stand_in.calls.clear()
    capsys.readouterr()
    assert study.main(["--resume", str(out), "--device", "cpu", "--seeds", "1", *change]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1
    assert out.read_text() == before and not study.stand_in.calls
    # the same settings named again are no difference
    assert study.main(["--resume", str(out), *ARGS, "--budget-stages", "3", "--seeds", "1"]) == 0


def test_failed_comparisons_stay_failed_unless_retried(study, tmp_path):
    out = tmp_path / "study.json"
    study.stand_in.comparison = _failing_once(study.stand_in.comparison)
    assert study.main([*ARGS, "--tasks", "chat:arithmetic@1", "--seeds", "0-1", "--budget-stages", "2",
                       "--out", str(out)]) == 0
    assert [(r["task"], r["seed"]) for r in _kinds(_rows(out), "error")] == [("chat:arithmetic", 0)]
    study.stand_in.calls.clear()
    assert study.main(["--resume", str(out), "--device", "cpu", "--tasks", "chat:arithmetic@1", "--seeds", "0-1"]) == 0
    assert study.stand_in.calls == []
    assert study.main(["--resume", str(out), "--device", "cpu", "--tasks", "chat:arithmetic@1", "--seeds", "0-1",
                       "--retry-failed"]) == 0
    rows = _rows(out)
    assert study.stand_in.calls == [("chat:arithmetic", 1, 0)] and not _kinds(rows, "error")
    assert {r["seeds"] for r in _kinds(rows, "summary")} == {2}


def _failing_once(comparison):
    state = {"failed": False}

    def run(*args):
        if not state["failed"]:
            state["failed"] = True
            raise RuntimeError("the policy's next-token logits hold NaN")
        return comparison(*args)
    return run


def test_no_comparison_starts_that_the_earlier_ones_say_would_end_past_the_budget(study, tmp_path, capsys):
    out = tmp_path / "study.json"
    study.stand_in.seconds = 300.0
    assert study.main([*ARGS, "--budget-stages", "2", "--seeds", "0", "--out", str(out)]) == 0
    study.stand_in.calls.clear()
    assert study.main(["--resume", str(out), "--device", "cpu", "--seeds", "1-3", "--time-budget", "200"]) == 0
    assert study.stand_in.calls == []
    assert "6 of these tasks and seeds left (continue with --resume" in capsys.readouterr().out


def test_an_older_rows_file_gives_its_settings_through_its_command_line(study, tmp_path, capsys):
    """The first H200 call's rows (no settings row): its budget (2 stages from its calibration),
    default methods, preset and depth carry on; its failed comparison stays failed."""
    out = tmp_path / "study.json"
    shutil.copy(DATA, out)
    assert study.main(["--resume", str(out), "--device", "cpu", "--seeds", "0-1", "--budget-stages", "3"]) == 2
    assert "budget_stages: 2 -> 3" in capsys.readouterr().err
    assert study.main(["--resume", str(out), "--device", "cpu", "--seeds", "0-1"]) == 0
    assert study.stand_in.calls == [("chat:arithmetic", 1, 1), ("chat:rg:letter_counting", 0, 1)]
    rows = _rows(out)
    [settings] = _kinds(rows, "settings")
    assert (settings["budget_stages"], settings["preset"], settings["depth"], settings["policy"]) == (2, "lm", 2,
                                                                                                     "smollm2")
    assert settings["methods"] == list(study.METHODS)
    arithmetic = [r for r in _kinds(rows, "summary") if r["task"] == "chat:arithmetic"]
    assert {r["seeds"] for r in arithmetic} == {2} and len(arithmetic) == 7
    assert {r["seeds"] for r in _kinds(rows, "summary") if r["task"] == "chat:rg:letter_counting"} == {1}


@pytest.mark.parametrize("argv, said", [
    (["--tasks", "chat:arithmetic"], "TASK@DIFFICULTY"),
    (["--seeds", "a-b"], "seeds like 0-4"),
    (["--out", "/nonexistent/rows.json", "--methods", "tree,annealing"], "unknown annealing"),
    ([], "name the rows file"),
    (["--resume", "/nonexistent/rows.json"], "no such file to resume"),
])
def test_bad_arguments_are_one_line_errors(study, capsys, argv, said):
    assert study.main(["--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1


def test_an_existing_out_file_is_not_overwritten_without_resume(study, tmp_path, capsys):
    out = tmp_path / "study.json"
    out.write_text("[]")
    assert study.main([*ARGS, "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err and out.read_text() == "[]"


@pytest.mark.slow
def test_the_study_runs_and_resumes_on_a_tiny_model_from_disk(tmp_path):
    """The real engine: two seeds of one task in two runs on a tiny GPT-2, rows pooled."""
    from tests.training.test_hf_policy import tiny_gpt2_on_disk

    study = bench_module("smollm2_study")
    model = tiny_gpt2_on_disk(tmp_path / "model")
    out = tmp_path / "study.json"
    args = ["--device", "cpu", "--tasks", "sorting@0", "--methods", "tree,fixed", "--depth", "1"]
    assert study.main([*args, "--policy", str(model), "--preset", "lm-cpu", "--budget-stages", "1",
                       "--seeds", "0", "--out", str(out)]) == 0
    assert study.main(["--resume", str(out), *args, "--seeds", "0-1"]) == 0
    rows = _rows(out)
    assert [r["seed"] for r in _kinds(rows, "comparison")] == [0, 1] and not _kinds(rows, "error")
    methods = _kinds(rows, "method")
    assert len(methods) == 4 and all(0.0 <= r["test_reward"] <= 1.0 for r in methods)
    assert len({r["samples"] for r in methods if r["method"] == "fixed"}) == 1
    assert {(r["method"], r["seeds"]) for r in _kinds(rows, "summary")} == {("tree", 2), ("fixed", 2)}


def test_a_method_run_on_another_gpu_than_its_seeds_tree_is_left_out_of_the_pairing(study, tmp_path, capsys,
                                                                                     monkeypatch):
    """A comparison resumed a method at a time on another GPU model than its tree's: two machines'
    greedy decoding of the same base already differ, so that method's seed is no pair. It is run,
    said at the start, kept in the rows, and left out of that method's summary (which names it)."""
    out = tmp_path / "study.json"
    args = [*ARGS, "--tasks", "chat:arithmetic@1", "--seeds", "0-1", "--budget-stages", "8", "--by-method"]
    monkeypatch.setattr(study, "_gpu", lambda device: "GPU A")
    study.stand_in.kill_at = 3  # seed 0's grid
    with pytest.raises(KeyboardInterrupt):
        study.main([*args, "--out", str(out)])
    study.stand_in.kill_at = None
    monkeypatch.setattr(study, "_gpu", lambda device: "GPU B")
    assert study.main(["--resume", str(out), *args]) == 0
    said = capsys.readouterr().out
    assert "chat:arithmetic seed 0: its tree ran on GPU A, this is GPU B: grid is left out of its pairs" in said
    summary = {r["method"]: r for r in _kinds(_rows(out), "summary")}
    assert summary["fixed"]["versus_tree"]["n"] == 2 and "other_gpu_seeds" not in summary["fixed"]
    assert summary["grid"]["versus_tree"]["n"] == 1 and summary["grid"]["test"]["n"] == 1
    assert summary["fixed"]["comparisons"] == 1 and "all 1 at once" not in study.summary_line(summary["fixed"])
    assert summary["grid"]["other_gpu_seeds"] == [0]
    assert "seed 0 left out: another GPU than the tree's" in study.summary_line(summary["grid"])
    assert [r["method"] for r in _kinds(_rows(out), "method") if r["seed"] == 0] == ["tree", "fixed", "grid"]


@pytest.mark.parametrize("by_method", [False, True])
def test_rows_of_one_gpu_pair_as_before_and_nothing_is_said(study, tmp_path, capsys, monkeypatch, by_method):
    monkeypatch.setattr(study, "_gpu", lambda device: "GPU A")
    out = tmp_path / "study.json"
    assert study.main([*ARGS, "--seeds", "0-1", "--budget-stages", "2", "--out", str(out),
                       *(["--by-method"] if by_method else [])]) == 0
    assert all("other_gpu_seeds" not in r and r["seeds"] == 2 for r in _kinds(_rows(out), "summary"))
    assert "left out" not in capsys.readouterr().out


def test_a_method_on_another_gpu_in_every_seed_is_said_with_no_pair(study, tmp_path, capsys, monkeypatch):
    out = tmp_path / "study.json"
    args = [*ARGS, "--tasks", "chat:arithmetic@1", "--seeds", "0", "--budget-stages", "8", "--by-method"]
    monkeypatch.setattr(study, "_gpu", lambda device: "GPU A")
    study.stand_in.kill_at = 3  # grid
    with pytest.raises(KeyboardInterrupt):
        study.main([*args, "--out", str(out)])
    study.stand_in.kill_at = None
    monkeypatch.setattr(study, "_gpu", lambda device: "GPU B")
    assert study.main(["--resume", str(out), *args]) == 0
    summary = {r["method"]: r for r in _kinds(_rows(out), "summary")}
    assert summary["grid"]["verdict"] == "no pair" and summary["grid"]["other_gpu_seeds"] == [0]
    said = capsys.readouterr().out
    assert "grid    test   -    tree-method +nan  no pair  (1 seeds; seed 0 left out" in said, said


def test_a_comparison_begun_a_method_at_a_time_is_finished_so_without_by_method(study, tmp_path, capsys,
                                                                                 monkeypatch):
    """Resumed without --by-method on another GPU: the rest still runs a method at a time (said
    where it leaves a method out of its pairs), and the parts merge into one comparison row."""
    out = tmp_path / "study.json"
    args = [*ARGS, "--tasks", "chat:arithmetic@1", "--seeds", "0", "--budget-stages", "8"]
    monkeypatch.setattr(study, "_gpu", lambda device: "GPU A")
    study.stand_in.kill_at = 3  # grid
    with pytest.raises(KeyboardInterrupt):
        study.main([*args, "--by-method", "--out", str(out)])
    study.stand_in.kill_at = None
    study.stand_in.methods.clear()
    monkeypatch.setattr(study, "_gpu", lambda device: "GPU B")
    assert study.main(["--resume", str(out), *args]) == 0
    assert "grid is left out of its pairs" in capsys.readouterr().out
    assert study.stand_in.methods == [("grid",)]
    [comparison] = _kinds(_rows(out), "comparison")
    assert comparison["parts"] == 3 and [st["method"] for st in comparison["stages"]] == ["tree", "fixed", "grid"]


def test_a_run_on_the_cpu_records_no_gpu_even_on_a_gpu_host(study, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "GPU A")
    assert study._gpu("cpu") is None
    assert study._gpu("auto") == study._gpu("cuda:0") == "GPU A"


def test_a_rows_file_is_summarized_again_without_reading_the_model_or_running_anything(study, tmp_path, capsys,
                                                                                        monkeypatch):
    """``--summarize``: the summary rows recomputed from FILE's rows with this code (each pair alone
    and all of a task's comparisons with the tree at once), printed and written; nothing is run."""
    out = tmp_path / "study.json"
    assert study.main([*ARGS, "--seeds", "0-2", "--budget-stages", "2", "--out", str(out)]) == 0
    rows = _rows(out)
    out.write_text(json.dumps([r for r in rows if r["kind"] != "summary"]))
    calls = len(study.stand_in.calls)
    monkeypatch.setattr(study, "_read_model", lambda policy: pytest.fail("the model was read"))
    capsys.readouterr()
    assert study.main(["--resume", str(out), "--summarize"]) == 0
    said = capsys.readouterr().out
    assert len(study.stand_in.calls) == calls
    summary = _kinds(_rows(out), "summary")
    assert len(summary) == 6 and all(r["comparisons"] == 2 for r in summary)
    fixed = next(r for r in summary if r["method"] == "fixed")
    assert fixed["versus_tree_all"]["low"] <= fixed["versus_tree"]["low"] and fixed["verdict_all"] in (
        "higher", "lower", "no difference")
    w = fixed["versus_tree_all"]
    assert f"all 2 at once [{w['low']:+.3f}, {w['high']:+.3f}]: " in said and said.count("tree-method") == 6
    assert study.main(["--summarize", "--device", "cpu"]) == 2
    assert "--summarize needs --resume FILE" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps([r for r in rows if r["kind"] in ("meta", "settings")]))
    assert study.main(["--resume", str(empty), "--summarize"]) == 0
    assert "has no finished comparison: nothing to summarize" in capsys.readouterr().out
