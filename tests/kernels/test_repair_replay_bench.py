"""bench/repair_replay.py in its CPU smoke mode: repair on vs off at the same budget, each arm's
repair rate and best speedup in the JSON it writes."""

from __future__ import annotations

import json
import subprocess
import sys

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
