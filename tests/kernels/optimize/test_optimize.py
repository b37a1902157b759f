"""`loopwise kernels optimize` end to end on CPU (Triton interpreted): the loop, the best file that
runs on its own, and a run killed with SIGKILL that resumes without judging anything twice."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from judge_doubles import StandInJudge

PROBLEM = Path(__file__).parents[1] / "expert_problems" / "chain.py"


def _cmd(tmp_path, *extra):
    return [sys.executable, "-m", "loopwise", "kernels", "optimize", *extra, "--device", "cpu",
            "--runs-dir", str(tmp_path / "runs"), "--set", "kernels.eval.perf_trials=3"]


def _verdicts(run_dir: Path) -> list[str]:
    db = sqlite3.connect(run_dir / "run.sqlite")
    try:
        return [row[0] for row in db.execute("SELECT key FROM events WHERE kind = 'evaluation' ORDER BY seq")]
    finally:
        db.close()


@pytest.mark.slow
def test_optimize_writes_a_best_modelnew_that_runs_on_its_own(tmp_path, cli_env):
    out = subprocess.run(_cmd(tmp_path, str(PROBLEM), "--budget", "3", "--json"), capture_output=True, text=True,
                         env=cli_env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    assert summary["evaluations"] == 3 and summary["best"]["status"] == "correct"
    assert summary["timing_meaningful"] is False  # judged on the CPU
    assert "candidates run in Triton's CPU interpreter" in out.stderr
    check = (f"import importlib.util, torch, sys; sys.path.insert(0, {str(PROBLEM.parent)!r}); import chain;"
             f"spec = importlib.util.spec_from_file_location('best', {summary['best_path']!r});"
             "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m);"
             "args = chain.get_inputs(); ref = chain.Model(*chain.get_init_inputs())(*args);"
             "new = m.ModelNew(*chain.get_init_inputs())(*args); assert torch.allclose(ref, new, atol=1e-5), 'differs'")
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=cli_env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.slow
def test_killed_run_resumes_and_judges_nothing_twice(tmp_path, cli_env):
    proc = subprocess.Popen(_cmd(tmp_path, str(PROBLEM), "--budget", "6"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=cli_env, start_new_session=True)
    deadline = time.monotonic() + 300
    run_dir = None
    while time.monotonic() < deadline:
        runs = list((tmp_path / "runs").glob("*/run.sqlite"))
        if runs:
            run_dir = runs[0].parent
            try:
                if len(_verdicts(run_dir)) >= 2:
                    break
            except sqlite3.Error:
                pass
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert run_dir is not None
    before = _verdicts(run_dir)
    assert 2 <= len(before) < 6
    out = subprocess.run(_cmd(tmp_path, "--resume", run_dir.name, "--json"), capture_output=True, text=True,
                         env=cli_env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    after = _verdicts(run_dir)
    assert after[:len(before)] == before  # nothing lost
    assert len(after) == 6 and len(set(after)) == 6  # the budget, and no candidate judged twice
    assert json.loads(out.stdout)["evaluations"] == 6


@pytest.mark.parametrize("executor", [[], pytest.param(["--executor", "ray", "--workers", "cpu"], marks=pytest.mark.slow)],
                         ids=["local", "ray"])  # ray: a cluster started, about 14 s
def test_sigterm_stops_a_run_cleanly_and_says_how_to_resume(tmp_path, cli_env, executor):
    """`kill`, `timeout` and a Slurm time limit send SIGTERM: the run stops as with Ctrl-C (exit
    143, one line, the resume command), not with a traceback, and with Ray not with the stack dump
    its own SIGTERM handler prints. The exchange proposer waits for an answer that never comes."""
    exchange = tmp_path / "exchange"
    proc = subprocess.Popen(_cmd(tmp_path, str(PROBLEM), "--budget", "2", "--proposer", "exchange",
                                 "--exchange-dir", str(exchange), *executor),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    try:
        deadline = time.monotonic() + 120
        while not (exchange / "prompt-0001.md").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert (exchange / "prompt-0001.md").exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed check or a run that ignored the signal
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == "terminated"
    assert "Traceback" not in err and "SIGTERM received" not in err, err[-2000:]
    (run_id,) = [p.name for p in (tmp_path / "runs").iterdir()]
    line = " ".join(out.split())
    assert f"continue with: loopwise kernels optimize --resume {run_id}" in line
    assert line.endswith(" ".join(["--runs-dir", str((tmp_path / "runs").resolve()), *executor])), line  # on the same executor


@pytest.mark.slow
def test_optimize_with_an_llm_over_the_real_wire_protocol(tmp_path, cli_env):
    """The LLM proposer against a local OpenAI-compatible server: a good reply is judged, bad replies
    are recorded as failed proposals, nothing stops the run."""
    from fake_llm_server import FakeLLMServer, good, malformed, no_code

    here = Path(__file__).parents[1] / "candidates"
    server = FakeLLMServer().start()
    try:
        server.queue(good((here / "triton_relu.py").read_text()), malformed(), no_code(), no_code())
        out = subprocess.run(_cmd(tmp_path, str(here / "problems" / "relu.py"), "--proposer", "llm", "--llm-model",
                                  "test-model", "--llm-base-url", server.base_url + "/v1", "--budget", "1", "--json"),
                             capture_output=True, text=True, env=cli_env, timeout=600)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    assert summary["evaluations"] == 1 and summary["best"]["status"] == "correct"
    run_dir = tmp_path / "runs" / summary["run_id"]
    db = sqlite3.connect(run_dir / "run.sqlite")
    failed = [json.loads(row[0])["reason"] for row in
              db.execute("SELECT payload FROM events WHERE kind = 'proposal_failed'")]
    calls = [json.loads(row[0]) for row in db.execute("SELECT payload FROM events WHERE kind = 'llm_call'")]
    db.close()
    assert "syntax_error" in failed or "no_code" in failed
    assert len(calls) >= 2 and calls[0]["origin"].endswith("test-model") and calls[0]["input_tokens"] > 0


@pytest.mark.slow
def test_optimize_on_two_workers_judges_a_batch_at_once(tmp_path, cli_env):
    """--workers cpu,cpu: each expansion's candidates go to two worker processes at once; the run
    records them in node order like a run in this process, and every verdict names its worker."""
    out = subprocess.run(_cmd(tmp_path, str(PROBLEM), "--budget", "4", "--workers", "cpu,cpu", "--json"),
                         capture_output=True, text=True, env=cli_env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    assert summary["evaluations"] == 4 and summary["best"]["status"] == "correct"
    run_dir = tmp_path / "runs" / summary["run_id"]
    db = sqlite3.connect(run_dir / "run.sqlite")
    rows = list(db.execute("SELECT json_extract(payload, '$.node'), json_extract(payload, '$.log_sha256') "
                           "FROM events WHERE kind = 'evaluation' ORDER BY seq"))
    db.close()
    assert [node for node, _ in rows] == sorted(node for node, _ in rows)
    workers = {(run_dir / "artifacts" / sha[:2] / sha).read_text().splitlines()[0] for _, sha in rows}
    assert workers == {"[judged on worker-0:cpu]", "[judged on worker-1:cpu]"}


def test_a_time_limit_stops_between_steps_and_the_run_resumes_to_its_budget(tmp_path):
    """With a deadline the search starts no step after it (the step under way finishes, its
    verdicts recorded) and says it stopped early; resumed, it judges the rest of the budget and
    nothing twice."""
    from loopwise.config import load_config
    from loopwise.kernels.evaluate.result import Evaluation, Status
    from loopwise.kernels.optimize import OptimizeRun, Settings
    from loopwise.kernels.problem import load_problem

    judged, now = [], [0.0]  # a clock the judge advances: 0.3 s a verdict

    class SlowJudge(StandInJudge):
        def evaluate(self, source, name):
            now[0] += 0.3
            judged.append(source)
            return Evaluation(status=Status.CORRECT, problem="chain", candidate=name,
                              candidate_key=str(len(judged)), speedup=1.0 + len(judged) / 10)

    cfg, runs = load_config(None, []), str(tmp_path / "runs")
    settings = Settings(problem=str(PROBLEM), search="greedy", budget=6, profiling="none")
    run = OptimizeRun.start(settings, cfg, runs, SlowJudge(), load_problem(str(PROBLEM)))
    assert run.run(deadline=0.1, clock=lambda: now[0]) is False  # past it once the first step's two are judged
    assert run.tally.evaluations == 2
    run_id = run.store.meta.run_id
    run.store.close()
    again = OptimizeRun.resume(run_id, cfg, runs, lambda problem: SlowJudge(), load_problem)
    assert again.tally.evaluations == 2
    assert again.run() is True and again.tally.evaluations == 6
    again.store.close()
    assert len(judged) == 6 and len(set(judged)) == 6  # every candidate judged once


def test_a_time_limit_must_be_a_positive_number_of_seconds(tmp_path):
    out = subprocess.run(_cmd(tmp_path, str(PROBLEM), "--time-limit", "0"), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert [line for line in out.stderr.splitlines() if line.strip()] == [
        "error: --time-limit 0: expected a number of seconds above 0"], out.stderr


@pytest.mark.slow  # two whole commands judging in the interpreter: about 16 s
def test_the_printed_resume_command_resumes_the_run_from_another_folder(tmp_path, cli_env):
    """A run stopped by --time-limit prints the command that continues it; pasted as printed in
    another folder it finds the run (its runs folder is in the command) and judges the rest under
    the judge settings the run was started with (read back from the run, not repeated)."""
    import shlex

    runs = tmp_path / "my runs"
    first = subprocess.run([sys.executable, "-m", "loopwise", "kernels", "optimize", str(PROBLEM), "--budget", "1",
                            "--time-limit", "0.001", "--device", "cpu", "--runs-dir", str(runs),
                            "--set", "kernels.eval.perf_trials=3", "--set", "kernels.eval.precision=relaxed"],
                           capture_output=True, text=True, env=dict(cli_env, COLUMNS="60"), timeout=600)
    assert "time limit reached" in first.stdout, first.stdout + first.stderr[-2000:]
    (line,) = [ln for ln in first.stdout.splitlines() if "continue with: " in ln]
    words = shlex.split(line.split("continue with: ", 1)[1])
    assert words[:3] == ["loopwise", "kernels", "optimize"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = subprocess.run([sys.executable, "-m", *words, "--json"], capture_output=True, text=True,
                           env=dict(cli_env, PYTHONPATH=str(Path(__file__).parents[3])), cwd=elsewhere, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout)
    (run_dir,) = runs.iterdir()
    assert summary["run_id"] == run_dir.name and summary["evaluations"] == 1
    assert summary["best"]["policy"] == "relaxed" and summary["best"]["timing"]["trials"] == 3


QUICK_LLM = ["--set", "llm.max_retries=1", "--set", "llm.backoff_initial_s=0", "--set", "llm.tools=false"]


def _llm_run(tmp_path, cli_env, base_url):
    relu = Path(__file__).parents[1] / "candidates" / "problems" / "relu.py"
    return subprocess.run(_cmd(tmp_path, str(relu), "--proposer", "llm", "--llm-model", "test-model",
                               "--llm-base-url", base_url, "--budget", "2", *QUICK_LLM),
                          capture_output=True, text=True, env=cli_env, timeout=300)


@pytest.mark.slow
def test_a_model_that_cannot_be_reached_is_said_so_with_its_cause(tmp_path, cli_env):
    """Nothing listens on 127.0.0.1:9: the run ends with no candidate, and says that the model
    could not be reached and why, and how many proposals failed, not just 'failures: none'."""
    out = _llm_run(tmp_path, cli_env, "http://127.0.0.1:9/v1")
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, out.stderr[-2000:]
    assert "proposals: 0 answered, 2 failed (api_error 2)" in text, text
    assert "test-model at http://127.0.0.1:9/v1 could not be reached" in text and "Connection refused" in text
    assert "(2 attempts)" in text and "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_server_error_and_an_answer_without_valid_code_count_as_failed_proposals(tmp_path, cli_env):
    from fake_llm_server import FakeLLMServer, malformed, server_error

    server = FakeLLMServer().start()
    try:
        server.queue(server_error(500), server_error(500), malformed())
        out = _llm_run(tmp_path, cli_env, server.base_url + "/v1")
    finally:
        server.stop()
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, out.stderr[-2000:]
    # the answer that did not parse is asked again (the server, its script spent, answers 500 again)
    assert "proposals: 0 answered, 3 failed (api_error 2, syntax_error 1), 1 re-prompts" in text, text
    assert "answered HTTP 500" in text and "syntax" in text
    assert "stopped early: no candidate was judged: all 3 proposals failed" in text
