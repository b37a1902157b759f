"""bench/repair_replay.py: repair on vs off at the same budget, each arm's repair rate and best
speedup in the JSON it writes (in its CPU smoke mode), within a total time limit that a slow or
hung arm cannot overrun, with the JSON written after every arm and the time of each arm split by
what it was doing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from bench_modules import BENCH, bench_module


def test_the_replayed_mistakes_are_the_typical_ones():
    replay = bench_module("repair_replay")
    for case in replay.CASES:
        improve, repair = replay.scripts(case)
        assert "tl.arang(0, BLOCK)" in improve[0] and case.index[1] in improve[1]
        assert "```" not in improve[2] and improve[3] == improve[0]  # no code block, then a duplicate
        assert "tl.dot(a, b)" in improve[4] and len(set(improve[5:] + repair)) == len(improve[5:] + repair)


@pytest.mark.slow  # two whole optimize runs in Triton's interpreter: about 90 s
def test_the_smoke_run_compares_repair_on_and_off(tmp_path, cli_env):
    out = tmp_path / "replay.json"
    run = subprocess.run([sys.executable, str(BENCH / "repair_replay.py"), "--smoke", "--out", str(out)],
                         capture_output=True, text=True, env=cli_env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    on, off = result["problems"]["relu"]["on"], result["problems"]["relu"]["off"]
    assert on["evaluations"] == off["evaluations"] == 4
    assert on["repair_requests"] >= 1 and on["repairs_correct"] == on["repair_requests"]
    assert result["totals"]["on"]["repair_rate"] == 1.0 and result["totals"]["off"]["repair_rate"] is None
    assert off["repair_requests"] == 0 and off["answers_used"]["repair"] == 0
    assert off["failures"] == {"crash": 1, "wrong_output": 1, "exploit": 1}, off
    assert on["best_speedup"] and off["best_speedup"] and result["smoke"] is True
    assert on["correct"] == 2 and off["correct"] == 1  # the two repairs against one honest answer
    assert result["complete"] is True and result["totals"]["problems_compared"] == ["relu"]
    assert [c["status"] for c in on["candidates"]].count("correct") == on["correct"]
    for row in (on, off):
        timing = row["timing"]
        assert timing["judged"] == 4 and timing["judging_s"] > 0 and timing["proposing_s"] > 0
        parts = sum(v for k, v in timing.items() if k.endswith("_s") and k != "wall_s")
        assert abs(parts - timing["wall_s"]) < 0.5 and not row["killed"] and not row["time_limited"]
    lines = run.stdout.splitlines()
    assert any(re.match(r"\[\d\d:\d\d:\d\d \+ *[\d.]+s\] relu repairs on: start", ln) for ln in lines), lines
    assert any("relu repairs off: " in ln and "judged" in ln and "judging" in ln for ln in lines), lines


def test_each_judged_candidate_is_a_row_with_the_times_its_speedup_came_from():
    replay = bench_module("repair_replay")
    timing = {"median_ms": 0.04, "gpu_median_ms": 0.01, "launch_median_ms": 0.03}
    reference = {"median_ms": 0.01, "gpu_median_ms": 0.011}
    events = [(0.0, "reference", {}), (1.0, "proposal", {"by": "exchange/improve"}),
              (2.0, "evaluation", {"node": 1, "evaluation": {"status": "compile_error"}}),
              (3.0, "proposal", {"by": "exchange/repair"}),
              (4.0, "evaluation", {"node": 2, "evaluation": {"status": "correct", "speedup": 0.25,
                                                            "timing": timing, "reference_timing": reference}})]
    first, second = replay.candidate_rows(events)
    assert first == {"node": 1, "by": "exchange/improve", "status": "compile_error", "speedup": None, "ms": None,
                     "gpu_ms": None, "launch_ms": None, "reference_ms": None, "reference_gpu_ms": None}
    assert second == {"node": 2, "by": "exchange/repair", "status": "correct", "speedup": 0.25, "ms": 0.04,
                      "gpu_ms": 0.01, "launch_ms": 0.03, "reference_ms": 0.01, "reference_gpu_ms": 0.011}


def _row(judged: int = 6) -> dict:
    timing = {"startup_s": 1.0, "reference_s": 1.0, "proposing_s": 2.0, "judging_s": 3.0, "other_s": 0.0,
              "closing_s": 1.0, "wall_s": 8.0, "judged": judged}
    return {"seconds": 8.0, "time_limit_s": 60.0, "killed": False, "time_limited": False, "timing": timing,
            "evaluations": judged, "correct": 3, "best_speedup": 1.2, "repair_requests": 3, "repairs_correct": 3,
            "failures": {}}


def test_the_json_is_written_after_every_arm_so_a_killed_run_keeps_what_it_finished(tmp_path, monkeypatch, capsys):
    replay = bench_module("repair_replay")
    done = []

    def arm(case, repairs, budget, device, work, perf_trials, limit_s):
        if len(done) == 3:  # the fourth arm: the bench is killed from outside while it runs
            raise KeyboardInterrupt
        done.append((case.name, repairs, budget, limit_s))
        return _row()

    monkeypatch.setattr(replay, "run_arm", arm)
    out = tmp_path / "replay.json"
    try:
        replay.main(["--out", str(out), "--budget-s", "200", "--device", "cpu"])
    except KeyboardInterrupt:
        pass
    result = json.loads(out.read_text())
    assert result["complete"] is False and result["budget"] == replay.BUDGET
    assert [(name, repairs) for name, repairs, _, _ in done] == [("scaled_gelu", 1), ("scaled_gelu", 0), ("relu", 1)]
    assert set(result["problems"]) == {"scaled_gelu", "relu"} and set(result["problems"]["relu"]) == {"on"}
    assert result["totals"]["problems_compared"] == ["scaled_gelu"]  # relu's off arm never finished
    assert all(budget == replay.BUDGET for _, _, budget, _ in done)  # the same budget for both arms
    printed = capsys.readouterr().out
    assert printed.count("repairs on: start") == 2 and "scaled_gelu repairs off: 8.0 s: 6 judged" in printed


def test_the_arms_time_limits_keep_the_whole_run_within_its_budget():
    """Arms that use all they get (each then stopped, which takes ``KILL_GRACE_S`` more) never take
    the run past ``--budget-s``; arms that use half of it all run."""
    replay = bench_module("repair_replay")
    for budget_s in (60.0, 240.0, 600.0):
        for share in (0.0, 0.5, 1.0):  # of its limit an arm takes: none, half, all of it and is stopped
            left, ran = budget_s, 0
            for arms_left in (4, 3, 2, 1):
                limit = replay.arm_limit(left, arms_left)
                if limit < replay.MIN_ARM_S:
                    continue
                ran += 1
                left -= share * limit + (replay.KILL_GRACE_S if share == 1.0 else 0.0)
            assert left >= 0.0, (budget_s, share)
            if budget_s >= 240.0 and share <= 0.5:
                assert ran == 4, (budget_s, share)


def test_an_arm_past_its_limit_is_stopped_with_its_children(tmp_path, monkeypatch):
    replay = bench_module("repair_replay")
    monkeypatch.setattr(replay, "KILL_GRACE_S", 1.0)
    child = tmp_path / "child.pid"
    stubborn = ("import os, signal, subprocess, sys, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                f"open({str(child)!r}, 'w').write(str(p.pid))\n"
                "time.sleep(60)\n")
    start = time.monotonic()
    code, _, _, killed = replay.run_within([sys.executable, "-c", stubborn], {}, 2.0)
    assert killed and time.monotonic() - start < 10
    pid = int(child.read_text())
    for _ in range(50):  # the grandchild went with its group
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {pid} outlived the arm")
    code, out, _, killed = replay.run_within([sys.executable, "-c", "print('ok')"], {}, 30.0)
    assert (code, out.strip(), killed) == (0, "ok", False)


def test_an_arms_time_is_split_by_what_its_run_was_doing():
    replay = bench_module("repair_replay")
    events = [(10.0, "settings", {}), (12.0, "reference", {}), (12.1, "ask", {}), (12.2, "request", {}),
              (14.2, "proposal", {}), (16.7, "evaluation", {}), (16.8, "ask", {}), (18.8, "proposal_failed", {}),
              (19.0, "best", {})]
    timing = replay.arm_timing(events, started=6.0, ended=22.0)
    assert timing == {"startup_s": 4.0, "reference_s": 2.0, "proposing_s": 4.0, "judging_s": 2.5, "other_s": 0.5,
                      "closing_s": 3.0, "wall_s": 16.0, "judged": 1, "judging_s_per_candidate": 2.5}
    assert replay.arm_timing([], started=0.0, ended=5.0)["startup_s"] == 5.0
