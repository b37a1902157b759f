"""`loopwise kernels bench` from a user's point of view: which problems a rule selects, the table's
arithmetic, and a small bench end to end on CPU stand-in workers that resumes without rework."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from loopwise.errors import UserError
from loopwise.kernels.bench.run import aggregate, order_problems, problem_row, select_problems

PROBLEMS = Path(__file__).parents[1] / "expert_problems"


@pytest.fixture()
def checkout(tmp_path):
    """A KernelBench-shaped checkout: KernelBench/level1/{1_chain,2_activations,6_softmax_rows}.py."""
    level = tmp_path / "kb" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for i, name in ((1, "chain"), (2, "activations"), (6, "softmax_rows")):
        shutil.copy(PROBLEMS / f"{name}.py", level / f"{i}_{name}.py")
    (level / "notes.txt").write_text("not a problem")
    return tmp_path / "kb"


def test_rules_select_problems_by_id(checkout):
    ids = lambda rule: [(lv, i) for lv, i, _ in select_problems(checkout, [1], rule)]  # noqa: E731
    assert ids("all") == [(1, 1), (1, 2), (1, 6)]
    assert ids("first:2") == [(1, 1), (1, 2)]
    assert ids("every:5") == [(1, 1), (1, 6)]
    assert ids("ids:1/2,1/6") == [(1, 2), (1, 6)]
    for bad in ("every:0", "some", "first:x", "ids:1/9"):
        with pytest.raises(UserError):
            select_problems(checkout, [1], bad)
    with pytest.raises(UserError, match="not a KernelBench checkout"):
        select_problems(checkout / "KernelBench" / "level1", [1], "all")


def test_a_shuffled_order_is_a_seeded_permutation_over_every_level_and_a_bad_order_is_refused(tmp_path):
    """``shuffled:SEED`` runs the selection in one random order, the same for the same seed on any
    machine and whatever order the problems came in, so that a bench stopped early has finished a
    uniform sample of it and a resumed one goes on in the same order."""
    problems = [(lv, i, tmp_path / f"level{lv}" / f"{i}_p.py") for lv in (1, 2, 3) for i in range(1, 41)]
    assert order_problems(problems, "id") == problems
    first = order_problems(problems, "shuffled:20261213")
    assert sorted(first) == sorted(problems) and first != problems
    assert order_problems(list(reversed(problems)), "shuffled:20261213") == first
    assert order_problems(problems, "shuffled:1") != first
    # a uniform sample: the first third holds problems of every level, not only level 1's
    assert {lv for lv, _, _ in first[:40]} == {1, 2, 3}
    for bad in ("shuffled", "shuffled:x", "random:1", "id:2", ""):
        with pytest.raises(UserError, match="--order"):
            order_problems(problems, bad)


def test_the_geomean_over_compile_carries_its_interval_over_problems():
    """The 95% t-interval of the geomean over compile, from the logs of the problems' ratios: it
    holds the geomean, narrows as problems agree, and is absent below two problems."""
    def rows(ratios):
        base = {"eager": {"timing": {"median_ms": 1.0}}, "compile": {"status": "ok", "timing": {"median_ms": 1.0}}}
        return [problem_row(1, i, f"p{i}", {"run_id": "r", "evaluations": 2, "best_speedup": r, "failures": {},
                                            "best": {"timing": {"median_ms": 1.0 / r}, "reference_timing": {"median_ms": 1.0}}},
                            base, same_gpu=True) for i, r in enumerate(ratios)]

    spread = aggregate(rows([0.8, 1.0, 1.25, 1.6, 2.0]))[0]
    low, high = spread["geomean_over_compile_ci95"]
    assert low < spread["geomean_over_compile"] < high and low < 1.0 < high
    close = aggregate(rows([1.30, 1.31, 1.29, 1.30, 1.32]))[0]
    low2, high2 = close["geomean_over_compile_ci95"]
    assert 1.0 < low2 < 1.30 < high2 < 1.35 and high2 - low2 < (high - low) / 10
    assert aggregate(rows([1.5]))[0]["geomean_over_compile_ci95"] is None


def test_where_eager_with_tf32_was_timed_the_row_gives_the_relaxed_tracks_yardstick():
    """The relaxed track's denominator: the faster of eager with TF32 allowed and torch.compile; no
    TF32 timing (kernels.baseline.tf32 off) gives no such ratio; no correct candidate counts as eager."""
    def base(compile_ms, tf32_ms):
        out = {"eager": {"timing": {"median_ms": 8.0}}, "compile": {"status": "ok", "timing": {"median_ms": compile_ms}}}
        if tf32_ms is not None:
            out["eager_tf32"] = {"status": "ok", "timing": {"median_ms": tf32_ms}}
        return out

    best = {"run_id": "r", "evaluations": 2, "best_speedup": 4.0, "failures": {},
            "best": {"timing": {"median_ms": 2.0}, "reference_timing": {"median_ms": 8.0}}}
    none = {"run_id": "r", "evaluations": 2, "best_speedup": None, "best": None, "failures": {}}
    tf32_faster = problem_row(1, 1, "a", best, base(4.0, 3.0), same_gpu=True)
    compile_faster = problem_row(1, 2, "b", best, base(4.0, 6.0), same_gpu=True)
    untimed = problem_row(1, 3, "c", best, base(4.0, None), same_gpu=True)
    nothing_correct = problem_row(1, 4, "d", none, base(4.0, 2.0), same_gpu=True)
    assert tf32_faster["over_yardstick"] == pytest.approx(1.5) and tf32_faster["over_compile"] == pytest.approx(2.0)
    assert compile_faster["over_yardstick"] == pytest.approx(2.0) and compile_faster["eager_tf32_ms"] == 6.0
    assert untimed["over_yardstick"] is None
    assert nothing_correct["over_yardstick"] == pytest.approx(0.25)  # eager (8 ms) against TF32's 2 ms
    line = aggregate([tf32_faster, compile_faster, untimed])[0]
    assert line["yardstick_measured"] == 2 and line["geomean_over_yardstick"] == pytest.approx(3.0 ** 0.5)


def test_a_resumed_bench_keeps_the_order_it_was_started_with(tmp_path):
    from loopwise.config import load_config
    from loopwise.kernels.bench.run import Bench, BenchSettings

    cfg = load_config(None, [f"store.runs_dir={tmp_path / 'runs'}"])
    bench = Bench.start(BenchSettings(levels=[1, 2], order="shuffled:5"), cfg)
    run_id = bench.store.meta.run_id
    bench.store.close()
    again = Bench.resume(run_id, cfg)
    assert again.s.order == "shuffled:5"
    again.store.close()


def test_the_table_counts_problems_without_a_correct_candidate_as_the_reference():
    def summary(speedup, eager_ms):
        best = {"timing": {"median_ms": eager_ms / speedup}, "reference_timing": {"median_ms": eager_ms}} if speedup else None
        return {"run_id": "r", "evaluations": 4, "best_speedup": speedup, "best": best, "failures": {}}

    base = lambda eager, comp: {"eager": {"timing": {"median_ms": eager}}, "compile": {"status": "ok", "timing": {"median_ms": comp}}}  # noqa: E731
    rows = [problem_row(1, 1, "a", summary(2.0, 4.0), base(4.0, 2.0)),   # 2x eager; compile is 2x too -> 1x
            problem_row(1, 2, "b", summary(None, 1.0), base(1.0, 0.5)),  # nothing correct: eager, 0.5x compile
            problem_row(2, 1, "c", summary(1.2, 1.0), None)]             # no compile timing
    assert rows[0]["over_compile"] == pytest.approx(1.0) and rows[1]["over_compile"] == pytest.approx(0.5)
    level1, level2, total = aggregate(rows)
    assert level1["group"] == "level 1" and level1["problems"] == 2 and level1["correct"] == 1
    assert level1["geomean_over_eager"] == pytest.approx(2.0 ** 0.5)  # 2x and 1x
    assert level1["geomean_over_compile"] == pytest.approx(0.5 ** 0.5)
    assert level1["fast_0_eager"] == 0.5 and level1["fast_1.5_eager"] == 0.5 and level1["fast_2_eager"] == 0.0
    assert level1["fast_1_compile"] == 0.0 and level1["fast_0_compile"] == 0.5
    assert level2["geomean_over_compile"] is None and level2["compile_measured"] == 0
    assert total["problems"] == 3 and total["fast_1_eager"] == pytest.approx(2 / 3)


def test_the_table_states_the_search_cost_and_the_problems_below_compile():
    def row(pid, speedup, comp, seconds):
        best = {"timing": {"median_ms": 1.0 / speedup}, "reference_timing": {"median_ms": 1.0}}
        summary = {"run_id": "r", "evaluations": 3, "best_speedup": speedup, "best": best, "failures": {}}
        base = {"eager": {"timing": {"median_ms": 1.0}}, "compile": {"status": "ok", "timing": {"median_ms": comp}}}
        return problem_row(1, pid, str(pid), summary, base, seconds=seconds)

    # over compile (eager 1 ms): 0.5x (below), 0.98x (a tie within timing noise), 2.0x
    rows = [row(1, 1.0, 0.5, 40.0), row(2, 1.0, 0.98, 50.0), row(3, 2.0, 1.0, 60.0)]
    assert rows[0]["seconds"] == 40.0
    level1 = aggregate(rows)[0]
    assert level1["seconds_per_problem"] == pytest.approx(50.0)
    assert level1["below_compile"] == 1  # under 0.97x torch.compile: timing noise allowed
    unknown = aggregate([{**rows[0], "seconds": None}])[0]
    assert unknown["seconds_per_problem"] is None


def test_a_problem_whose_compiled_output_fails_the_judge_is_not_below_compile_but_counted_apart():
    def row(pid, comp_ms, correct):
        best = {"timing": {"median_ms": 1.0}, "reference_timing": {"median_ms": 1.0}}
        summary = {"run_id": "r", "evaluations": 2, "best_speedup": 1.0, "best": best, "failures": {}}
        base = {"eager": {"timing": {"median_ms": 1.0}},
                "compile": {"status": "ok", "timing": {"median_ms": comp_ms}, "correct": correct,
                            "correct_message": "" if correct else "output 0: 2000 of 2000 elements outside atol=rtol=0.0001"}}
        return problem_row(1, pid, str(pid), summary, base)

    rows = [row(1, 0.5, False), row(2, 0.5, True), row(3, 0.5, None)]  # None: not judged (an older cache)
    assert rows[0]["compile_correct"] is False and "outside" in rows[0]["compile_message"]
    level1 = aggregate(rows)[0]
    assert level1["below_compile"] == 2 and level1["compile_wrong"] == 1
    assert level1["geomean_over_compile"] == pytest.approx(0.5)  # the ratio itself is still shown
    from loopwise.kernels.report.bench_html import table_rows

    cols, lines = table_rows(aggregate(rows))
    assert lines[0][cols.index("compile wrong")] == "1" and lines[0][cols.index("below 0.97x compile")] == "2"


def test_a_row_gives_the_ratio_over_compile_under_each_clock():
    # ours: 0.1 ms of GPU work, 0.3 ms of launch; compile: 0.12 ms of GPU work, 0.15 ms of launch
    best = {"timing": {"median_ms": 0.2, "kernelbench_median_ms": 0.2, "gpu_median_ms": 0.1,
                       "launch_median_ms": 0.3, "clock": "kernelbench"},
            "reference_timing": {"median_ms": 0.4}}
    summary = {"run_id": "r", "evaluations": 2, "best_speedup": 2.0, "best": best, "failures": {}}
    base = {"eager": {"timing": {"median_ms": 0.4}},
            "compile": {"status": "ok", "timing": {"median_ms": 0.25, "kernelbench_median_ms": 0.25,
                                                   "gpu_median_ms": 0.12, "launch_median_ms": 0.15}}}
    row = problem_row(1, 1, "a", summary, base)
    assert row["over_compile_kernelbench"] == pytest.approx(1.25)
    assert row["over_compile_gpu"] == pytest.approx(1.2)
    assert row["over_compile_steady"] == pytest.approx(0.5)  # launch-bound: 0.15 / 0.3
    assert row["best_launch_ms"] == 0.3 and row["compile_gpu_ms"] == 0.12
    old = problem_row(1, 1, "a", summary, {"eager": base["eager"], "compile": {"status": "ok", "timing": {"median_ms": 0.25}}})
    assert old["over_compile_steady"] is None and old["over_compile"] == pytest.approx(1.25)
    from loopwise.kernels.report.bench_html import table_rows

    cols, rows = table_rows(aggregate([row]))
    assert rows[0][cols.index("vs compile: gpu / steady clock")] == "1.20x / 0.50x"
    assert "vs compile: gpu / steady clock" not in table_rows(aggregate([old]))[0]


def test_on_one_gpu_the_ratio_over_compile_is_compile_over_ours_by_one_clock():
    """The judge timed eager at 0.4 ms beside our 0.2 ms; the baseline timed eager again at 0.5 ms
    (a launch-bound eager varies so) beside compile's 0.25 ms. On one GPU the row gives 0.25 / 0.2,
    not 2.0 x 0.25 / 0.5, which carries the two eager timings' disagreement; over several GPUs it
    keeps the product, so no ratio holds two GPUs' clocks."""
    best = {"timing": {"median_ms": 0.2}, "reference_timing": {"median_ms": 0.4}}
    summary = {"run_id": "r", "evaluations": 2, "best_speedup": 2.0, "best": best, "failures": {}}
    base = {"eager": {"timing": {"median_ms": 0.5}}, "compile": {"status": "ok", "timing": {"median_ms": 0.25}}}
    assert problem_row(1, 1, "a", summary, base, same_gpu=True)["over_compile"] == pytest.approx(1.25)
    assert problem_row(1, 1, "a", summary, base)["over_compile"] == pytest.approx(1.0)
    none = {"run_id": "r", "evaluations": 2, "best_speedup": None, "best": None, "failures": {}}
    assert problem_row(1, 1, "a", none, base, same_gpu=True)["over_compile"] == pytest.approx(0.5)  # the reference


def _loopwise(env, *args, timeout=900):
    return subprocess.run([sys.executable, "-m", "loopwise", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.slow
def test_a_bench_on_two_workers_gives_the_table_and_resumes_without_rework(checkout, tmp_path, cli_env):
    runs = tmp_path / "runs"
    common = ["--kernelbench", str(checkout), "--device", "cpu", "--set", f"store.runs_dir={runs}",
              "--set", "kernels.eval.perf_trials=3"]
    out = _loopwise(cli_env, "kernels", "bench", "kernelbench", "--levels", "1", "--subset", "ids:1/1,1/6",
                    "--budget", "2", "--no-compile", "--workers", "cpu,cpu", "--json", *common)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert [r["problem"] for r in result["problems"]] == ["level1/1_chain", "level1/6_softmax_rows"]
    # not a terminal: a line per finished problem, so a log shows how far a long bench got
    assert "1/2 level1/" in out.stderr and "2/2 level1/" in out.stderr
    assert all(r["evaluations"] == 2 for r in result["problems"])
    level1, total = result["table"]
    assert level1["problems"] == 2 and level1["correct"] >= 1 and total["group"] == "all"
    assert Path(result["report"]).read_text().count("level1/6_softmax_rows") >= 1
    assert result["timing_meaningful"] is False and "speedups are not meaningful" in Path(result["report"]).read_text()
    # each search's verdicts came from the workers (the evaluation logs name them)
    logs = set()
    for row in result["problems"]:
        db = sqlite3.connect(runs / row["run_id"] / "run.sqlite")
        for (sha,) in db.execute("SELECT json_extract(payload, '$.log_sha256') FROM events WHERE kind='evaluation'"):
            blob = (runs / row["run_id"] / "artifacts" / sha[:2] / sha).read_text()
            logs.add(blob.splitlines()[0])
        db.close()
    assert logs <= {"[judged on worker-0:cpu]", "[judged on worker-1:cpu]"} and logs
    again = _loopwise(cli_env, "kernels", "bench", "--resume", result["run_id"], "--json", *common)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["problems"] == result["problems"]  # nothing judged again
    report = _loopwise(cli_env, "report", result["run_id"], "--runs-dir", str(runs))
    assert report.returncode == 0 and "report written" in report.stdout


def test_bench_errors_are_one_line(tmp_path, checkout, cli_env):
    out = _loopwise(cli_env, "kernels", "bench", "kernelbench", "--subset", "every:x", "--kernelbench", str(checkout),
                    "--set", f"store.runs_dir={tmp_path / 'runs'}", timeout=120)
    assert out.returncode != 0 and "--subset" in out.stderr and "Traceback" not in out.stderr
    out = _loopwise(cli_env, "kernels", "bench", "kernelbench", "--order", "random", "--kernelbench", str(checkout),
                    "--set", f"store.runs_dir={tmp_path / 'runs'}", timeout=120)
    assert out.returncode != 0 and "--order 'random'" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # refused before any run
    out = _loopwise(cli_env, "kernels", "bench", "kernelbench", "--workers", "gpu0", "--kernelbench", str(checkout),
                    "--set", f"store.runs_dir={tmp_path / 'runs'}", timeout=120)
    assert out.returncode != 0 and "--workers" in out.stderr and "Traceback" not in out.stderr


def test_an_interrupted_bench_starts_no_further_problem_and_stops_the_running_search(checkout, tmp_path):
    """Ctrl-C or SIGTERM (raised in the main thread) while a problem's search runs on the pool's
    thread: the queued problems are dropped, the running search is told to stop after its step,
    and the interrupt reaches the caller (before, every queued problem still ran to its end)."""
    import threading

    from loopwise.config import load_config
    from loopwise.kernels.bench.run import Bench, BenchSettings

    cfg = load_config(None, [f"store.runs_dir={tmp_path / 'runs'}"])
    started, stop_seen = [], threading.Event()

    class Probe(Bench):
        def _one(self, level, pid, path, dispatcher, stop=None):
            started.append(pid)
            if len(started) == 1:
                return {"level": level, "id": pid, "problem": f"{level}/{pid}", "evaluations": 1,
                        "best_speedup": 1.0, "over_compile": None}
            stop_seen.set() if stop is not None and stop.wait(5) else None
            return {"level": level, "id": pid, "problem": f"{level}/{pid}", "evaluations": 0,
                    "best_speedup": None, "over_compile": None}

    bench = Probe.start(BenchSettings(levels=[1]), cfg)

    def interrupt(row):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bench.run(select_problems(checkout, [1], "all"), progress=interrupt)
    assert started[:1] == [1] and len(started) <= 2  # at most the one already running when it came
    assert stop_seen.is_set() or len(started) == 1
    bench.store.close()


@pytest.mark.slow
def test_a_bench_stopped_by_sigterm_says_how_to_continue_on_its_workers_and_that_line_finishes_it(checkout, tmp_path,
                                                                                                  cli_env):
    """SIGTERM mid-bench: exit 143, the resume line names the workers the bench ran on (a run started on
    stand-in workers, or on Ray, continues there), and running that line finishes the bench."""
    import shlex
    import signal
    import time

    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "loopwise", "kernels", "bench", "kernelbench", "--levels", "1",
                             "--subset", "ids:1/1,1/6", "--budget", "2", "--no-compile", "--workers", "cpu",
                             "--kernelbench", str(checkout), "--device", "cpu", "--runs-dir", str(runs),
                             "--set", "kernels.eval.perf_trials=3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:  # the first problem's search has begun
            if len(list(runs.glob("*/run.sqlite"))) >= 2:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err[-2000:]
    (line,) = [ln for ln in (out + err).splitlines() if "continue with: " in ln]
    words = shlex.split(line.split("continue with: ", 1)[1])
    assert words[:4] == ["loopwise", "kernels", "bench", "--resume"] and words[-2:] == ["--workers", "cpu"], words
    again = subprocess.run([sys.executable, "-m", *words, "--json"], capture_output=True, text=True, env=cli_env,
                           timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout)
    assert [r["problem"] for r in result["problems"]] == ["level1/1_chain", "level1/6_softmax_rows"]
    assert all(r["evaluations"] == 2 for r in result["problems"])


# A problem whose sandbox hangs while the test holds it: its module (loaded by every sandbox that
# judges a candidate, ``judge``) or its reference's forward (called in a sandbox only when the bench
# times its baselines, ``baseline``) writes the sandbox's pid, then sleeps for ten minutes.
_HANGING_HEAD = '''import multiprocessing
import os
import pathlib
import time

import torch
import torch.nn as nn

HOLD, MARK = pathlib.Path({hold!r}), pathlib.Path({mark!r})


def _hang():
    if multiprocessing.current_process().name == "loopwise-sandbox" and HOLD.exists():
        MARK.write_text(str(os.getpid()))
        time.sleep(600)


{at_load}
'''


def _hanging(hold, mark, where: str) -> str:
    """The chain fixture (expert_problems/chain.py) with the hang at load (``judge``) or at the
    start of the reference's forward (``baseline``)."""
    chain = (PROBLEMS / "chain.py").read_text()
    body = chain.split("import torch.nn as nn\n", 1)[1]
    if where == "baseline":
        body = body.replace("    def forward(self, x, y):\n", "    def forward(self, x, y):\n        _hang()\n", 1)
    head = _HANGING_HEAD.format(hold=str(hold), mark=str(mark), at_load="_hang()" if where == "judge" else "")
    return head + body


def _events(run_dir: Path, kind: str) -> list[tuple[str, dict]]:
    db = sqlite3.connect(run_dir / "run.sqlite")
    try:
        return [(key, json.loads(payload)) for key, payload in
                db.execute("SELECT key, payload FROM events WHERE kind = ? ORDER BY seq", (kind,))]
    finally:
        db.close()


def _finished(runs: Path) -> list[str]:
    """The problems a bench under ``runs`` has recorded as finished (while it runs)."""
    for path in runs.glob("*/run.sqlite"):
        try:
            done = [key for key, _ in _events(path.parent, "problem_result")]
        except sqlite3.Error:
            continue
        if done:
            return done
    return []


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.parametrize("where, executor", [("judge", []), ("baseline", []), ("judge", ["--workers", "cpu,cpu"])],
                         ids=["judge", "baseline", "judge-on-a-worker"])
def test_sigterm_stops_a_bench_within_seconds_while_a_sandbox_works_and_keeps_the_finished_problems(
        checkout, tmp_path, cli_env, where, executor):
    """SIGTERM while the judge waits on a sandbox that takes minutes (a candidate's verdict, or the
    baselines' eager and torch.compile timings; in this process or on a worker): the bench ends
    within seconds (exit 143) with the sandbox killed, the problem finished before it kept, and the
    resume line; that line judges nothing twice and finishes only the stopped problem. (Before, the
    signal reached the main thread only, and the bench waited for the problem's thread to finish
    its verdict, its search and its baselines: minutes, until `timeout` sent SIGKILL; a worker
    stopped mid-job was killed alone, its sandbox left running.)"""
    import shlex
    import signal
    import time

    level = checkout / "KernelBench" / "level1"
    hold, mark = tmp_path / "hold", tmp_path / "hanging.pid"
    hold.touch()
    (level / "3_hanging.py").write_text(_hanging(hold, mark, where))
    runs = tmp_path / "runs"
    common = ["--kernelbench", str(checkout), "--device", "cpu", "--runs-dir", str(runs),
              "--set", "kernels.eval.perf_trials=3"]
    proc = subprocess.Popen([sys.executable, "-m", "loopwise", "kernels", "bench", "kernelbench", "--levels", "1",
                             "--subset", "ids:1/1,1/3", "--budget", "1", "--search", "greedy", "--per-step", "1",
                             *(["--no-compile"] if where == "judge" else []), *executor, *common],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    try:
        deadline = time.monotonic() + 600
        while not (mark.exists() and _finished(runs)) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert mark.exists() and _finished(runs) == ["1/1"], proc.communicate(timeout=30)
        time.sleep(0.5)
        sandbox = int(mark.read_text())
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("the bench did not exit within 15 s of SIGTERM" if proc.poll() is None else
                        f"the bench exited ({proc.returncode}), but a process it started (the sandbox) still "
                        "holds its output 15 s after SIGTERM")
        took = time.monotonic() - sent
        for _ in range(50):  # the hanging sandbox went with the bench
            if _gone(sandbox):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the sandbox {sandbox} outlived the bench")
    finally:
        if proc.poll() is None:
            proc.kill()
        if mark.exists() and not _gone(int(mark.read_text())):
            os.kill(int(mark.read_text()), signal.SIGKILL)  # else it holds the bench's pipes for ten minutes
        if proc.stdout is not None and not proc.stdout.closed:
            proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-3000:]
    assert took < 15 and "Traceback" not in err, err[-3000:]
    (line,) = [ln for ln in (out + err).splitlines() if "continue with: " in ln]
    assert "stopped after 1 of 2 problems" in line, line
    words = shlex.split(line.split("continue with: ", 1)[1])
    assert ("--workers" in words) == bool(executor) and words[len(words) - len(executor):] == executor, words
    bench_dir = runs / words[words.index("--resume") + 1]
    finished = _events(bench_dir, "problem_result")
    assert [key for key, _ in finished] == ["1/1"]  # the finished problem is kept, the stopped one is not
    started = dict((key, p["run_id"]) for key, p in _events(bench_dir, "problem_started"))
    judged = len(_events(runs / started["1/3"], "evaluation"))
    assert judged == (0 if where == "judge" else 1)  # a stopped verdict is not recorded as one

    hold.unlink()
    again = subprocess.run([sys.executable, "-m", *words, "--json"], capture_output=True, text=True, env=cli_env,
                           timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = json.loads(again.stdout)["problems"]
    assert [r["problem"] for r in rows] == ["level1/1_chain", "level1/3_hanging"]
    assert rows[0] == finished[0][1]  # not run again
    assert rows[1]["run_id"] == started["1/3"]  # the stopped search continued, not started over
    assert [key for key, _ in _events(bench_dir, "problem_result")] == ["1/1", "1/3"]
    verdicts = [key for key, _ in _events(runs / started["1/3"], "evaluation")]
    assert len(verdicts) == rows[1]["evaluations"] == 1 and len(set(verdicts)) == 1  # nothing judged twice
