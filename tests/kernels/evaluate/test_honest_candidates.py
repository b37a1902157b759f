"""No false alarms: honest candidates (Triton kernels, a C++ extension through load_inline) are
judged correct by the full judge, static scan and dynamic checks together, on CPU."""

import os
from pathlib import Path

import pytest
import yaml

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.judge import LocalJudge
from loopwise.kernels.evaluate.result import Status
from loopwise.kernels.problem import load_problem

HONEST = Path(__file__).parents[1] / "candidates"
MANIFEST = yaml.safe_load((HONEST / "manifest.yaml").read_text())
# The C++ build, the interpreted odd-K GEMM, the centered rows and the bf16 GELU take 12-30 s each:
# the slow tier judges them.
SLOW = {"cpp_swish.py@swish", "triton_matmul_ieee.py@matmul_odd_k", "triton_centered_rows.py@centered_rows",
        "triton_gelu_bf16.py@gelu_bf16"}
GPU_ENTRIES = [e for e in MANIFEST if not e["cpu"] and not e["candidate"].startswith("cpp_")]


def _entry_id(entry: dict) -> str:
    """One name per entry: a candidate can be listed with several problems."""
    return f"{entry['candidate']}@{Path(entry['problem']).stem}"


@pytest.fixture(scope="module")
def interpret_triton(tmp_path_factory):
    saved = {k: os.environ.get(k) for k in ("TRITON_INTERPRET", "LOOPWISE_CACHE_DIR")}
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["LOOPWISE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


ENTRIES = [pytest.param(e, marks=pytest.mark.slow) if _entry_id(e) in SLOW else e for e in MANIFEST if e["cpu"]]


@pytest.mark.usefixtures("interpret_triton")
@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_honest_candidate_is_correct(entry, tmp_path):
    cfg = EvalConfig(perf_trials=3, warmup=1, seed=3, energy=False, compile_timeout_s=300)
    with LocalJudge(load_problem(str(HONEST / entry["problem"])), cfg, device="cpu", log_dir=tmp_path, spares=0) as j:
        ev = j.evaluate((HONEST / entry["candidate"]).read_text(), entry["candidate"])
    assert ev.status is Status.CORRECT, (ev.summary(), ev.log[-2000:])
    assert not ev.rejections
    assert ev.speedup is not None


@pytest.mark.gpu
@pytest.mark.parametrize("entry", GPU_ENTRIES, ids=_entry_id)
def test_honest_candidate_is_correct_on_the_gpu(entry, tmp_path):
    """At full size on a GPU: a K = 4095 zero-mean GEMM (outside allclose of cuBLAS, as near float64
    as it) and a log_softmax over 4.9 GB of logits (the judge and the sandbox share the GPU)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cfg = EvalConfig(perf_trials=20, seed=3, energy=False)
    with LocalJudge(load_problem(str(HONEST / entry["problem"])), cfg, device="cuda", log_dir=tmp_path, spares=0) as j:
        ev = j.evaluate((HONEST / entry["candidate"]).read_text(), entry["candidate"])
    assert ev.status is Status.CORRECT, (ev.summary(), ev.log[-3000:])
    assert ev.speedup is not None
