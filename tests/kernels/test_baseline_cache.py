"""The baseline cache (``kernels.baseline.cache``): a reference variant timed while other work kept
the CPUs busy is not kept as the problem's figure for later runs, and says why."""

import json

import pytest

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate import contention, measure
from loopwise.kernels.evaluate.measure import ReferenceTimes, VariantResult
from loopwise.kernels.evaluate.result import TimingStats

TIMING = TimingStats(trials=3, median_ms=8.0, mean_ms=8.0, std_ms=0.0, min_ms=8.0, max_ms=8.0)


@pytest.fixture()
def times(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(measure, "measure_variant", lambda *a, **k: VariantResult("compile", TIMING, None, "ok"))
    return ReferenceTimes(None, EvalConfig(perf_trials=3), "cpu")


def _cached(tmp_path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (tmp_path / "baselines").glob("*.json")]


def test_a_baseline_timed_on_busy_cpus_is_not_cached_and_says_so(times, tmp_path, monkeypatch):
    monkeypatch.setattr(contention, "sample", lambda: contention.Load(load_1min=7.5, cpus=2))
    result = times.get("a" * 64, "source", "compile", [], None)
    assert result.timing == TIMING and result.contended
    assert "busy" in result.message and "not cached" in result.message
    assert _cached(tmp_path) == []


def test_a_baseline_timed_on_idle_cpus_is_cached_with_the_load_it_saw(times, tmp_path, monkeypatch):
    monkeypatch.setattr(contention, "sample", lambda: contention.Load(load_1min=0.5, cpus=2))
    result = times.get("a" * 64, "source", "compile", [], None)
    assert not result.contended and result.message == ""
    (entry,) = _cached(tmp_path)
    assert entry["load_1min"] == 0.5 and entry["cpus"] == 2


PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 3.0


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("scale,correct", [(3.0, True), (3.01, False)])
def test_a_compiled_variants_output_is_judged_against_the_reference_and_the_verdict_cached(
        scale, correct, tmp_path, monkeypatch):
    """The compiled variant's output from its compiling call is held against the reference's by the
    judge's rule; the verdict is in the row and in the cached file, and a later run that reads the
    cache has it without timing again."""
    import torch

    from loopwise.config import Config
    from loopwise.kernels import baseline
    from loopwise.kernels.evaluate.inputs import draw_inputs
    from loopwise.kernels.problem import load_problem

    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(contention, "sample", lambda: contention.Load(load_1min=0.1, cpus=2))
    path = tmp_path / "relu3.py"
    path.write_text(PROBLEM)
    problem = load_problem(str(path))
    calls = []

    def fake(pool, source, kind, cfg, args, fresh):  # the compiled model's output, as the sandbox returns it
        calls.append(kind)
        return VariantResult(kind, TIMING, None, "ok", outputs=None if kind == "eager" else [torch.relu(args[0]) * scale])

    monkeypatch.setattr(measure, "measure_variant", fake)
    config = Config.model_validate({"kernels": {"eval": {"seed": 0, "perf_trials": 3}}})
    (args,) = [draw_inputs(problem.load_module(), 0)]
    assert args[0].shape == (8, 64)
    row = baseline.run_baseline(problem, config, device="cpu")
    assert row.compile.correct is correct and row.compile.outputs is None
    assert (row.compile.correct_message == "") is correct
    assert row.to_json_dict()["compile"]["correct"] is correct
    (entry,) = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "baselines").glob("*compile*.json")]
    assert entry["correct"] is correct
    again = baseline.run_baseline(problem, config, device="cpu")
    assert again.compile.correct is correct and calls.count("compile") == 1  # from the cache
