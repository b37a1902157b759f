"""bench/expert_subset.py's arithmetic: our best time against the baseline table's variants, and the
per-level summary (uncovered problems count as eager)."""

from __future__ import annotations

import pytest
from bench_modules import bench_module


@pytest.fixture(scope="module")
def es():
    return bench_module("expert_subset")


def test_subset_has_the_sizes_the_issue_asks_for(es):
    assert [len(es.SUBSET[level]) for level in (1, 2, 3)] == [19, 20, 10]
    assert all(len(set(ids)) == len(ids) for ids in es.SUBSET.values())


def test_our_time_is_compared_with_each_baseline_and_the_relaxed_yardstick(es):
    base = {"1/40": {"eager_ms": "8.0", "compile_ms": "0.4", "max_autotune_ms": "0.5", "eager_tf32_ms": "7.9"}}
    row = es.join_baselines({"level": 1, "id": 40, "best_ms": 0.2, "best_speedup": 40.0}, base)
    assert row["over_compile"] == pytest.approx(2.0) and row["over_max_autotune"] == pytest.approx(2.5)
    assert row["over_best_tf32_or_compile"] == pytest.approx(2.0)  # compile is the faster of the two
    # no candidate: the problem runs as eager, so it is compared at the eager time
    eager = es.join_baselines({"level": 1, "id": 40}, base)
    assert eager["over_compile"] == pytest.approx(0.05) and eager["eager_ms"] == 8.0


def test_summary_counts_uncovered_problems_as_eager(es):
    rows = {
        ("1", "1", "fp32"): {"level": "1", "id": "1", "problem": "a", "track": "fp32", "covered": "True",
                             "best_speedup": "4.0", "correct": "3", "evaluations": "4",
                             "statuses": "correct:3 wrong_output:1", "over_compile": "2.0"},
        ("1", "2", "fp32"): {"level": "1", "id": "2", "problem": "b", "track": "fp32", "covered": "False",
                             "correct": "0", "evaluations": "0", "statuses": "", "reason": "module Conv2d"},
    }
    text = es.summary(rows, "cmd")
    line = next(ln for ln in text.splitlines() if ln.startswith("| fp32 | 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:6] == ["2", "1", "3 / 4", "4.00 / 2.00"]  # geomean of 4.0 and 1.0 over all
    assert cells[9] == "50%" and "wrong_output 1" in cells[10]


def test_summary_says_how_many_covered_problems_are_partitioned(es):
    rows = {
        ("2", "21", "fp32"): {"level": "2", "id": "21", "problem": "a", "track": "fp32", "covered": "True",
                              "template": "graph", "best_speedup": "1.2", "correct": "8", "evaluations": "8",
                              "statuses": "correct:8", "reason": "partial (module GroupNorm): in PyTorch: Conv2d"},
        ("2", "1", "fp32"): {"level": "2", "id": "1", "problem": "b", "track": "fp32", "covered": "True",
                             "template": "elementwise", "best_speedup": "1.1", "correct": "8", "evaluations": "8",
                             "statuses": "correct:8"},
    }
    line = next(ln for ln in es.summary(rows, "cmd").splitlines() if ln.startswith("| fp32 | 2 |"))
    assert [c.strip() for c in line.strip("|").split("|")][3] == "2 (1 partial)"


def test_a_problem_cut_by_stop_s_is_not_written_and_runs_again(es, tmp_path, monkeypatch, capsys):
    """A search stopped between steps by --stop-s is not a row of the subset (it had fewer than
    --budget candidates): nothing is written for it, the script stops there, and the next call
    runs it again, whole."""
    files = [tmp_path / "a.py", tmp_path / "b.py"]
    calls = []

    def run_problem(level, pid, path, track, args, overrides):
        calls.append((path.name, args.deadline is not None))
        row = {"level": level, "id": pid, "problem": path.stem, "track": track, "covered": True,
               "evaluations": 8, "correct": 8, "best_speedup": 1.5}
        if len(calls) == 1:
            row.update(evaluations=2, cut="--stop-s reached after 2 of 8 candidates (run r1)")
        return row

    monkeypatch.setattr(es, "run_problem", run_problem)
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["--tracks", "fp32", "--problems", ",".join(map(str, files)), "--out", str(tmp_path / "out"),
            "--stop-s", "60"]
    assert es.main(argv) == 0
    out = capsys.readouterr().out
    assert "0/0/fp32: --stop-s reached after 2 of 8 candidates (run r1); not written" in out
    assert calls == [("a.py", True)] and not (tmp_path / "out" / "expert_subset.csv").exists()
    assert es.main(argv) == 0  # the next call: the cut problem again, then the rest
    assert [c[0] for c in calls] == ["a.py", "a.py", "b.py"]
    rows = (tmp_path / "out" / "expert_subset.csv").read_text().splitlines()
    assert len(rows) == 3 and all("2 of 8" not in r for r in rows)
