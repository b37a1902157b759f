"""bench/search_gpu.py's MemoProfiler: the ablation's arms share one measurement per candidate and
each reads it through its own mode (the recorded LayerNorm profile stands in for Nsight Compute)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench_modules import bench_module

RECORDED = Path(__file__).parent / "profile_fixtures" / "recorded" / "kernelbench_1_40"


@pytest.mark.slow
def test_each_candidate_is_measured_once_and_read_by_every_mode(tmp_path, monkeypatch):
    from loopwise.kernels.profile import run as profile_run

    calls = []

    def fake_profile(problem, candidate, folder, **kw):  # what Nsight Compute would leave behind
        calls.append((candidate.read_text() if candidate else None, kw["mode"]))
        shutil.copytree(RECORDED, folder, dirs_exist_ok=True)
        return profile_run.analyze(folder, mode=kw["mode"], costs={"ncu_s": 12.0}, write=False)

    monkeypatch.setattr(profile_run, "profile", fake_profile)
    memo = bench_module("search_gpu").MemoProfiler()
    problem = SimpleNamespace(name="40_LayerNorm", source="class Model: ...")
    cand = tmp_path / "a.py"
    cand.write_text("class ModelNew: ...")
    reports = {}
    for mode in ("proactive", "all", "raw"):
        for who in (None, cand):
            folder = tmp_path / mode / str(who is None)
            reports[mode, who is None] = memo(problem, who, folder, mode=mode, precision="fp32", trace=False)
    assert calls == [(None, "proactive"), ("class ModelNew: ...", "proactive")]
    assert (memo.measured, memo.reused) == (2, 4)
    assert {r.mode for r in reports.values()} == {"proactive", "all", "raw"}
    # a reuse runs no Nsight Compute (reading the SASS again is its only cost), and finds the same kernels
    assert "ncu_s" not in reports["all", False].costs_s and reports["proactive", False].costs_s["ncu_s"] == 12.0
    assert [k.name for k in reports["raw", True].kernels] == [k.name for k in reports["proactive", True].kernels]
    # another candidate is measured again
    other = tmp_path / "b.py"
    other.write_text("class ModelNew: pass")
    memo(problem, other, tmp_path / "b", mode="raw", precision="fp32", trace=False)
    assert memo.measured == 3 and calls[-1] == ("class ModelNew: pass", "raw")
