"""A sample budget's runs are unchanged by token budgets' machinery: all seven methods at a tiny
preset give the result rows, stage keys and traces recorded (``golden/sample_run.json``) from the
code before it. Slow tier: the rewards are floats recorded bit for bit on one CPU, which another
CPU's kernels need not reproduce. Rewrite the file with ``python tests/training/test_sample_budget_golden.py``
only for a change meant to move sample runs."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from loopwise.core.store import SqliteRunStore
from loopwise.training import session
from loopwise.training.run import Settings, TrainingRun

GOLDEN = Path(__file__).parent / "golden" / "sample_run.json"
TINY = session.Preset("smoke", stage_steps=2, prompts_per_step=4, num_generations=4, eval_n=16, pool_n=120,
                      warm_max_steps=40, warm_check_every=20, probe_n=8)
METHODS = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")
ROW = ("configs", "tune_reward", "test_reward", "stages_used", "samples", "tokens", "budget", "notes", "reasons",
       "zero_variance", "zero_variance_groups")


def _digest(runs_dir: str) -> dict:
    """The run's result rows (traces as a hash) and its stages' keys, methods and trace hashes."""
    run = TrainingRun.start(Settings("arithmetic", METHODS, budget=5, depth=2, difficulty=0), runs_dir)
    results = run.run()
    store = SqliteRunStore.open(runs_dir, run.store.meta.run_id)
    run.close()

    def sha(obj) -> str:
        return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()

    rows = {m: {**{k: r[k] for k in ROW}, "traces": sha(r["traces"])} for m, r in results.items()}
    stages = [[e.key, e.payload["method"], sha(e.payload["trace"])] for e in store.events(kind="stage")]
    return {"results": rows, "stages": stages}


@pytest.mark.slow
def test_a_sample_budget_run_is_the_one_recorded(monkeypatch, tmp_path):
    monkeypatch.setitem(session.PRESETS, "smoke", TINY)
    assert _digest(str(tmp_path)) == json.loads(GOLDEN.read_text())


if __name__ == "__main__":
    import tempfile

    session.PRESETS["smoke"] = TINY
    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(_digest(tmp), indent=1, sort_keys=True) + "\n")
    sys.exit(0)
