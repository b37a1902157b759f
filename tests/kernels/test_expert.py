"""The expert's first templates: what they recognize, and that what they emit is judged correct
(static scan, float64 stress trials and all) with Triton's CPU interpreter."""

from pathlib import Path

import pytest

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.judge import Judge
from loopwise.kernels.evaluate.result import Status
from loopwise.kernels.expert import capture, generate
from loopwise.kernels.problem import load_problem

HERE = Path(__file__).parent / "expert_problems"


def test_capture_recognizes_patterns_and_says_why_not():
    chain = capture(load_problem(str(HERE / "chain.py")))
    assert chain.kind == "elementwise" and chain.inputs == 2
    assert {"gelu", "sigmoid", "leaky_relu", "clamp"} <= set(chain.ops)
    assert capture(load_problem(str(HERE / "softmax_rows.py"))).kind == "row_softmax"
    ln = capture(load_problem(str(HERE / "layernorm.py")))
    assert ln.kind == "layernorm" and dict(ln.params)["n_cols"] == 350
    conv = capture(load_problem(str(HERE / "unsupported_conv.py")))
    assert conv.kind == "unsupported" and "parameters" in conv.reason


@pytest.mark.parametrize("name,moves", [("chain.py", {"block": 64}), ("activations.py", {"block": 512}), ("softmax_rows.py", {"block": 256}),
                                        ("softmax_rows.py", {"block": 2048, "warps": 4}),
                                        ("layernorm.py", {"block": 64, "chunk": 128})])
def test_generated_candidates_are_judged_correct(tmp_path, monkeypatch, name, moves):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # inherited by the sandbox
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    problem = load_problem(str(HERE / name))
    source, pattern = generate(problem, moves)
    assert source is not None, pattern.reason
    compile(source, name, "exec")
    cfg = EvalConfig(perf_trials=2, warmup=1, seed=9, energy=False)
    with Judge(problem, cfg, device="cpu", log_dir=tmp_path, spares=0) as judge:
        ev = judge.evaluate(source, f"expert-{name}")
    assert ev.status is Status.CORRECT, (ev.summary(), ev.log[-1500:])
    assert not ev.rejections
