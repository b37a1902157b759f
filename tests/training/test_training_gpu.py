"""The training engine on a GPU: a tiny comparison runs end to end on CUDA and resumes there."""

from __future__ import annotations

import pytest

from loopwise.training import session
from loopwise.training.run import Settings, TrainingRun

TINY = session.Preset("smoke", stage_steps=2, prompts_per_step=4, num_generations=4, eval_n=16, pool_n=120,
                     warm_max_steps=40, warm_check_every=20, probe_n=8)


@pytest.mark.gpu
def test_a_tiny_comparison_runs_on_cuda(monkeypatch, tmp_path):
    monkeypatch.setitem(session.PRESETS, "smoke", TINY)
    run = TrainingRun.start(Settings("arithmetic", ("tree", "staged", "pbt"), budget=4, depth=2, difficulty=0,
                                     device="cuda"), str(tmp_path))
    assert run.session.device == "cuda"
    results = run.run()
    run_id = run.store.meta.run_id
    run.close()
    budget = 4 * TINY.stage_steps * TINY.prompts_per_step * TINY.num_generations
    assert {r["stages_used"] for m, r in results.items() if m != "tree"} == {4}
    assert all(0 < r["samples"] <= budget for r in results.values())
    assert all(0.0 <= r["test_reward"] <= 1.0 for r in results.values())
    again = TrainingRun.resume(str(tmp_path), run_id)
    assert again.session.device == "cuda" and set(again.run()) == {"tree", "staged", "pbt"}
    again.close()
