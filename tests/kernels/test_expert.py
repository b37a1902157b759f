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


def _load(source, tmp_path, name):
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SM90_SIGNATURES = {
    "chain.py": {"fused_elementwise_kernel": (
        {"x0_ptr": "*fp32", "x1_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 1024})},
    "softmax_rows.py": {"softmax_rows_kernel": (
        {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 2048})},
    "layernorm.py": {
        "partial_sums_kernel": ({"x_ptr": "*fp32", "part_ptr": "*fp32", "n_cols": "i32", "splits": "i32",
                                 "CHUNK": "constexpr", "BLOCK": "constexpr"}, {"CHUNK": 16384, "BLOCK": 1024}),
        "partial_squares_kernel": ({"x_ptr": "*fp32", "part_ptr": "*fp32", "sq_ptr": "*fp32", "n_cols": "i32",
                                    "splits": "i32", "SPLITS_P2": "constexpr", "CHUNK": "constexpr",
                                    "BLOCK": "constexpr"}, {"SPLITS_P2": 256, "CHUNK": 16384, "BLOCK": 1024}),
        "finalize_kernel": ({"part_ptr": "*fp32", "sq_ptr": "*fp32", "stats_ptr": "*fp32", "n_cols": "i32",
                             "splits": "i32", "eps": "fp32", "SPLITS_P2": "constexpr"}, {"SPLITS_P2": 256}),
        "normalize_kernel": ({"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "stats_ptr": "*fp32",
                              "out_ptr": "*fp32", "n_cols": "i32", "n_elements": "i64", "HAS_AFFINE": "constexpr",
                              "BLOCK": "constexpr"}, {"HAS_AFFINE": True, "BLOCK": 1024})},
}


@pytest.mark.parametrize("name", sorted(SM90_SIGNATURES))
def test_templates_compile_for_hopper_without_a_gpu(tmp_path, name):
    """Ahead-of-time compile of every emitted kernel to sm_90 cubin: a template that only runs in the
    interpreter would fail here, in CI, before it reaches a GPU."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source, _ = generate(load_problem(str(HERE / name)))
    module = _load(source, tmp_path, name.removesuffix(".py") + "_aot")
    for kernel, (signature, constants) in SM90_SIGNATURES[name].items():
        compiled = triton.compile(ASTSource(getattr(module, kernel), signature, constants),
                                  target=GPUTarget("cuda", 90, 32))
        assert len(compiled.asm["cubin"]) > 1000
