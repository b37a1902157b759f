"""`loopwise kernels baseline`: the reference variants of a problem side by side, on the CPU here
(eager and eager with TF32 allowed: on a GPU the second is the relaxed track's yardstick)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loopwise.cli import app

EXAMPLE = Path(__file__).resolve().parents[2] / "loopwise" / "kernels" / "examples" / "scaled_gelu_problem.py"
ARGS = ["kernels", "baseline", str(EXAMPLE), "--no-compile", "--no-cache", "--device", "cpu",
        "--set", "kernels.baseline.perf_trials=3"]


def test_baseline_times_eager_and_eager_with_tf32(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ARGS + ["--tf32", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)  # the one-line CPU notice goes to stderr
    assert row["eager"]["status"] == "ok" and row["eager_tf32"]["status"] == "ok", row
    assert row["eager_tf32"]["timing"]["trials"] == 3 and row["eager_tf32"]["speedup_vs_eager"] > 0
    assert row["compile"] is None and row["floor_bound"] in ("memory", "compute")


def test_baseline_table_shows_the_tf32_column_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    plain = CliRunner().invoke(app, ARGS)
    assert plain.exit_code == 0, plain.output
    assert "eager+TF32" not in plain.output and "eager" in plain.output
    with_tf32 = CliRunner().invoke(app, ARGS + ["--tf32"])
    assert with_tf32.exit_code == 0 and "eager+TF32" in with_tf32.output


@pytest.mark.slow
def test_torch_compiles_output_is_judged_with_the_reference(tmp_path, monkeypatch):
    """torch.compile on the CPU (Inductor's C++), in its sandbox: its output from the compiling call
    comes back and passes the judge's rule against the reference's."""
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path))
    args = [a for a in ARGS if a != "--no-compile"]
    result = CliRunner().invoke(app, args + ["--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["compile"]["status"] == "ok", row["compile"]
    assert row["compile"]["correct"] is True and row["compile"]["correct_message"] == "", row["compile"]
