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
