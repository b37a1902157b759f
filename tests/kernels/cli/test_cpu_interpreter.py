"""Kernel commands on a machine without a CUDA GPU: Triton candidates run in Triton's CPU
interpreter without the user setting anything, the command says so in one line on stderr, and every
speedup timed that way is marked as not meaningful (table, JSON)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[3] / "loopwise" / "kernels" / "examples"
NOTICE = "candidates run in Triton's CPU interpreter"
MARK = "speedups are not meaningful"


def _no_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


pytestmark = pytest.mark.skipif(not _no_cuda(), reason="the CPU fallback is for machines without a CUDA GPU")


def _eval(cli_env, runs, *extra):
    env = {k: v for k, v in cli_env.items() if k != "TRITON_INTERPRET"}
    args = [sys.executable, "-m", "loopwise", "kernels", "eval", str(EXAMPLES / "scaled_gelu_problem.py"),
            str(EXAMPLES / "scaled_gelu_triton.py"), str(EXAMPLES / "scaled_gelu_cheat.py"), "--trials", "1",
            "--perf-trials", "3", "--runs-dir", str(runs), *extra]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_readme_example_is_judged_in_the_interpreter_and_its_speedup_marked(tmp_path, cli_env):
    table = _eval(cli_env, tmp_path / "runs")
    assert table.returncode == 1, table.stderr[-2000:]  # the cheat is rejected
    rows = {line.split()[1].rsplit("/", 1)[-1]: line for line in table.stdout.splitlines() if "scaled_gelu_" in line
            and line.startswith("│")}
    assert "correct" in rows["scaled_gelu_triton.py"], table.stdout
    assert "exploit" in rows["scaled_gelu_cheat.py"], table.stdout
    assert "0 active drivers" not in table.stdout
    assert [line for line in table.stderr.splitlines() if NOTICE in line], table.stderr
    assert MARK in table.stdout and "†" in rows["scaled_gelu_triton.py"]

    run_id = next((tmp_path / "runs").iterdir()).name
    again = _eval(cli_env, tmp_path / "runs", "--json", "--resume", run_id)
    verdicts = {Path(e["candidate"]).name: e for e in json.loads(again.stdout)}
    assert verdicts["scaled_gelu_triton.py"]["status"] == "correct"
    assert verdicts["scaled_gelu_triton.py"]["timing_meaningful"] is False
    assert verdicts["scaled_gelu_cheat.py"]["status"] == "exploit"
    assert NOTICE not in again.stdout and NOTICE in again.stderr


@pytest.mark.slow
def test_a_cuda_candidate_on_the_cpu_is_told_it_needs_an_nvidia_gpu(tmp_path, cli_env):
    cand = tmp_path / "cuda_copy.py"
    cand.write_text("import torch\nfrom torch.utils.cpp_extension import load_inline\n"
                    "mod = load_inline('copy_ext', cpp_sources='torch::Tensor run(torch::Tensor x);',\n"
                    "                  cuda_sources='__global__ void k() {}', functions=['run'])\n"
                    "class ModelNew(torch.nn.Module):\n"
                    "    def __init__(self, *args):\n        super().__init__()\n"
                    "    def forward(self, x):\n        return mod.run(x)\n")
    env = {k: v for k, v in cli_env.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "loopwise", "kernels", "eval", str(EXAMPLES / "scaled_gelu_problem.py"),
                          str(cand), "--trials", "1", "--perf-trials", "3", "--runs-dir", str(tmp_path / "runs"),
                          "--json"], capture_output=True, text=True, env=env, timeout=600)
    (verdict,) = json.loads(out.stdout)
    assert verdict["status"] in ("compile_error", "crash")
    assert "CUDA candidates need an NVIDIA GPU" in verdict["reasons"][0]["message"], verdict["reasons"]


def test_evaluation_timed_on_the_cpu_is_not_meaningful():
    from loopwise.kernels.evaluate.result import Evaluation, Status

    cpu = Evaluation(status=Status.CORRECT, problem="p", candidate="c", device="cpu", speedup=1.3)
    gpu = cpu.model_copy(update={"device": "NVIDIA H200"})
    assert cpu.timing_meaningful is False and cpu.to_json_dict()["timing_meaningful"] is False
    assert gpu.timing_meaningful is True and gpu.to_json_dict()["timing_meaningful"] is True


def test_judging_on_the_cpu_switches_triton_to_its_interpreter_unless_the_user_chose(monkeypatch):
    from loopwise.kernels import device

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert device.resolve_device("cpu") == "cpu" and os.environ["TRITON_INTERPRET"] == "1"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    device.resolve_device("cpu")
    assert os.environ["TRITON_INTERPRET"] == "0"
