"""Candidate code never sees the user's secrets: processes that run it hold an allow-listed
environment, and a candidate that goes looking for an API key finds none, so none reaches a
verdict, a log, the run store or the report."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from loopwise.kernels.evaluate import environment
from loopwise.kernels.evaluate import pool as pool_mod

KERNEL_TESTS = Path(__file__).parents[1]
CHEAT = KERNEL_TESTS / "exploits" / "environment_secret.py"
PROBLEM = KERNEL_TESTS / "exploits" / "problems" / "relu.py"
SECRET_NAMES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN",
                "TORCH_HUB_TOKEN", "CUDA_API_KEY", "TRITON_PASSWORD", "DB_CREDENTIALS")


def _planted() -> str:
    return f"sk-loopwise-planted-{secrets.token_hex(8)}"


def _files_holding(folder: Path, needle: str) -> list[str]:
    """Every file under ``folder`` whose bytes contain ``needle``."""
    raw = needle.encode()
    return [str(p) for p in folder.rglob("*") if p.is_file() and raw in p.read_bytes()]


def test_allow_list_keeps_what_the_toolchain_needs_and_never_a_secret():
    given = {name: "s3cret" for name in SECRET_NAMES}
    needed = {"PATH": "/usr/bin", "HOME": "/home/u", "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp", "CUDA_VISIBLE_DEVICES": "0",
              "CUDA_HOME": "/usr/local/cuda", "LD_LIBRARY_PATH": "/usr/lib", "TRITON_INTERPRET": "1",
              "TORCH_EXTENSIONS_DIR": "/x", "TORCHINDUCTOR_CACHE_DIR": "/y", "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
              "CXX": "g++", "NVCC_APPEND_FLAGS": "-lineinfo", "MAX_JOBS": "2", "OMP_NUM_THREADS": "1",
              "PYTHONPATH": "/src", "VIRTUAL_ENV": "/venv", "LOOPWISE_CACHE_DIR": "/c", "LOOPWISE_TIMING_GC": "on"}
    others = {"LOOPWISE_KERNELBENCH": "/kb", "SSH_AUTH_SOCK": "/s", "MY_SETTING": "x", "DISPLAY": ":0"}
    kept = environment.sandbox_environ({**given, **needed, **others})
    assert kept == needed
    assert all(environment.is_secret_name(name) for name in SECRET_NAMES)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_entering_the_sandbox_scrubs_the_environment_the_process_started_with():
    secret = _planted()
    code = ("import os; from loopwise.kernels.evaluate.environment import enter_sandbox; enter_sandbox();"
            "print(repr(dict(os.environ))); print(repr(open('/proc/self/environ', 'rb').read()))")
    env = {**os.environ, "OPENAI_API_KEY": secret, "UNLISTED_SETTING": secret + "-2"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert secret not in out.stdout
    assert "'PATH'" in out.stdout.splitlines()[0] and b"PATH=" in eval(out.stdout.splitlines()[1])


def _fresh_server_state():
    import multiprocessing.forkserver as fs

    fs._forkserver._stop()
    pool_mod._method = None
    pool_mod._server_env = None


@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_a_sandbox_finds_no_secret_to_leak(tmp_path, monkeypatch, start):
    """The dynamic side alone (static scan off): the cheat reads os.environ and /proc/self/environ
    in its constructor and in forward, and would raise with whatever it found."""
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.evaluate.result import Status
    from loopwise.kernels.problem import load_problem

    if start not in pool_mod.mp.get_all_start_methods():
        pytest.skip(f"no {start} start method here")
    secret = _planted()
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(pool_mod.START_ENV, start)
    _fresh_server_state()  # a server started now inherits the planted secret, as a user's would
    cfg = EvalConfig(static_check=False, correct_trials=1, stress_trials=0, perf_trials=2, warmup=0,
                     run_timeout_s=120, seed=3, energy=False)
    judge = LocalJudge(load_problem(str(PROBLEM)), cfg, device="cpu", log_dir=tmp_path / "logs", spares=0)
    try:
        ev = judge.evaluate(CHEAT.read_text(), "environment_secret.py")
    finally:
        judge.close()
        _fresh_server_state()
    assert ev.status is Status.CORRECT, ev.summary()
    assert secret not in json.dumps(ev.to_json_dict())
    assert "stolen at load: []" in "".join(p.read_text() for p in (tmp_path / "logs").glob("*.log"))
    assert _files_holding(tmp_path, secret) == []


def test_check_rejects_a_candidate_that_reads_the_environment(cli_env):
    secret = _planted()
    out = subprocess.run([sys.executable, "-m", "loopwise", "kernels", "check", str(CHEAT), "--json"],
                         capture_output=True, text=True, env={**cli_env, "OPENAI_API_KEY": secret}, timeout=120)
    assert out.returncode != 0
    assert "environment_read" in out.stdout
    assert secret not in out.stdout + out.stderr


@pytest.mark.slow
def test_an_optimize_run_records_no_secret(tmp_path, cli_env):
    """A model answers with the cheat; the static scan is off so that it runs. Nothing under the run
    folder (the store read as bytes, artifacts, logs, the report) nor the printed output holds the
    secret, though the driver itself holds it (it is the LLM client's key)."""
    from fake_llm_server import FakeLLMServer, good

    secret = _planted()
    server = FakeLLMServer().start()
    try:
        server.queue(good(CHEAT.read_text()))
        cmd = [sys.executable, "-m", "loopwise", "kernels", "optimize", str(PROBLEM), "--device", "cpu",
               "--runs-dir", str(tmp_path / "runs"), "--proposer", "llm", "--llm-model", "test-model",
               "--llm-base-url", server.base_url + "/v1", "--budget", "1", "--json",
               "--set", "kernels.eval.perf_trials=3", "--set", "kernels.eval.static_check=false"]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**cli_env, "OPENAI_API_KEY": secret},
                             timeout=600)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    assert summary["evaluations"] == 1 and summary["best"]["status"] == "correct", summary
    run_dir = tmp_path / "runs" / summary["run_id"]
    assert (run_dir / "run.sqlite").is_file()
    assert secret not in out.stdout + out.stderr
    assert _files_holding(run_dir, secret) == []


def test_the_profiler_runs_candidates_without_secrets(tmp_path, monkeypatch):
    """The profiled candidate (and ncu around it) start from the allow-listed environment."""
    from loopwise.errors import UserError
    from loopwise.kernels.problem import load_problem
    from loopwise.kernels.profile import run as profile_run

    secret = _planted()
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    seen = []

    def capture(argv, env, timeout, out, what):
        seen.append(env)
        raise UserError("stop after the first child")

    monkeypatch.setattr(profile_run, "_run", capture)
    with pytest.raises(UserError):
        profile_run.profile(load_problem(str(PROBLEM)), CHEAT, tmp_path / "profile", device="cpu", ncu="off")
    assert seen and "PATH" in seen[0] and "OPENAI_API_KEY" not in seen[0]
    assert secret not in json.dumps(seen[0])


def test_parallel_builds_import_candidates_without_secrets(tmp_path, monkeypatch):
    """precompile imports each candidate in a worker process: that import runs candidate code."""
    from loopwise.kernels.backends import precompile

    secret = _planted()
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    dump = tmp_path / "seen.txt"
    source = ("import os\n"
              f"with open({str(dump)!r}, 'wb') as fh:\n"
              "    fh.write(repr(dict(os.environ)).encode() + open('/proc/self/environ', 'rb').read())\n")
    builds = precompile([source], str(tmp_path / "ext"), None, jobs=1, timeout_s=120)
    assert builds[0].ok, builds
    assert b"PATH" in dump.read_bytes()
    assert secret.encode() not in dump.read_bytes()
