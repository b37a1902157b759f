"""The matrix product's compiled variants: the Triton template's 16-bit products, the CUTLASS
sources the judge's static scan accepts, the recorded SASS fixtures of each variant, and the
variants against torch on a GPU."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.generate import DEFAULT_MOVES, default_moves, render
from loopwise.kernels.problem import load_problem

from expert_judging import HERE, captured, matmul_pattern  # noqa: E402 - tests/kernels/expert on sys.path


FIXTURES = Path(__file__).parents[1] / "profile_fixtures"


_INTERPRETED = r'''
import importlib.util, sys
import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter

# The interpreter holds bf16 as its uint16 bits and tl.dot multiplies those bits (Triton does not
# support bf16 arithmetic in the interpreter: triton-lang/triton#11584); on the GPU the tensor cores
# multiply the values. Widen bf16 operands to fp32 first, as the hardware's products are exact.
original = interpreter.InterpreterBuilder.create_dot

def create_dot(self, a, b, d, *rest):
    def widen(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
    return original(self, widen(a), widen(b), d, *rest)

interpreter.InterpreterBuilder.create_dot = create_dot
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
problem = importlib.util.spec_from_file_location("problem", sys.argv[2])
reference = importlib.util.module_from_spec(problem)
problem.loader.exec_module(reference)
torch.manual_seed(0)
a, b = reference.get_inputs()
torch.save({"a": a, "b": b, "out": module.ModelNew()(a, b)}, sys.argv[3])
'''


def _rounding_excess(out, a, b, trans_a: bool, trans_b: bool) -> float:
    """The largest error of ``out`` against the float64 product, in units of what one rounding to
    the output type allows after an fp32 sum of K products: one ulp (relative 2^-7 bf16, 2^-10 fp16,
    2^-23 fp32; any rounding mode, as Triton's interpreter truncates fp32 to bf16 where the GPU
    rounds to nearest) plus K * 2^-22 of the sum of |products| (a loose bound on any summation
    order). At most 1 for a correct product in the output's own precision."""
    import torch

    unit = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -23}[out.dtype]
    a, b = (a.double().t() if trans_a else a.double()), (b.double().t() if trans_b else b.double())
    expected, scale = a @ b, a.abs() @ b.abs()
    allowed = unit * expected.abs() + a.shape[1] * 2.0 ** -22 * scale
    return ((out.double() - expected).abs() / allowed).max().item()


@pytest.mark.parametrize("name,moves", [("matmul_bf16.py", {"block": 64, "chunk": 32, "warps": 4}),
                                        ("matmul_bf16_odd.py", {"block": 32, "chunk": 16, "warps": 4}),
                                        ("matmul_fp16_at_bt.py", {"block": 32, "chunk": 16, "warps": 4})])
def test_the_triton_template_computes_16_bit_products_in_their_own_type(tmp_path, name, moves):
    """Loads in the inputs' type, accumulates in fp32 and stores C in the inputs' type. Run under
    Triton's interpreter in a subprocess (TRITON_INTERPRET is read when triton is imported)."""
    import os

    import torch

    pattern = captured(name)
    source = render(pattern, moves)
    assert "input_precision" not in source and "dtype=torch.float32" not in source
    candidate, saved = tmp_path / "candidate.py", tmp_path / "result.pt"
    candidate.write_text(source)
    done = subprocess.run([sys.executable, "-c", _INTERPRETED, str(candidate), str(HERE / name), str(saved)],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = torch.load(saved)
    p = dict(pattern.params)
    assert result["out"].dtype == getattr(torch, p["dtype"]) and tuple(result["out"].shape) == (p["m"], p["n"])
    assert _rounding_excess(result["out"], result["a"], result["b"], p["trans_a"], p["trans_b"]) <= 1.0


@pytest.mark.parametrize("name,inputs", [("matmul_bf16.py", "BF16"), ("matmul_fp16_at_bt.py", "F16")])
def test_the_triton_template_compiles_16_bit_products_to_wgmma_for_hopper(tmp_path, name, inputs):
    """Ahead of time, without a GPU: the default moves' kernel for sm_90 runs its products as
    HGMMA on the inputs' own type, accumulating in fp32, without spills."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from loopwise.kernels.profile.sass_tools import profile_cubin

    _needs_disassembler()
    path = tmp_path / "candidate.py"
    path.write_text(render(captured(name)))
    spec = importlib.util.spec_from_file_location("candidate_aot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pointer = "*bf16" if inputs == "BF16" else "*fp16"
    signature = {"a_ptr": pointer, "b_ptr": pointer, "c_ptr": pointer,
                 **dict.fromkeys(("M", "N", "K", "s_am", "s_ak", "s_bk", "s_bn", "s_cm", "s_cn"), "i32"),
                 **dict.fromkeys(("BM", "BN", "BK", "GROUP_M"), "constexpr")}
    moves = DEFAULT_MOVES["matmul"]
    constants = {"BM": moves["block"], "BN": moves["block"], "BK": moves["chunk"], "GROUP_M": 8}
    compiled = triton.compile(ASTSource(module.matmul_kernel, signature, constants), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": moves["warps"], "num_stages": 3})
    (kernel,) = profile_cubin(compiled.asm["cubin"]).kernels
    assert {(op.opcode, op.inputs, op.accumulator) for op in kernel.tensor_core} == {("HGMMA", inputs, "F32")}
    assert kernel.local_loads == 0 and kernel.local_stores == 0


def test_the_judges_static_scan_accepts_the_cutlass_candidates():
    """bf16 / fp16 types are the problem's own precision (the relaxed static policy of a half
    problem reports them as info); the 3xTF32 candidate passes the fp32 policy itself: CUTLASS's
    float types with OpMultiplyAddFastF32 are fp32-accurate, and the source names no TF32 type."""
    from loopwise.kernels.check import detect_backends, scan
    from loopwise.kernels.evaluate.verdict import static_policy

    bf16_problem = load_problem(str(HERE / "matmul_bf16.py"))
    policy = static_policy(bf16_problem, "fp32")
    assert policy == "relaxed"
    for moves in ({"template": "matmul_cutlass"}, {"template": "matmul"}):
        source = render(capture(bf16_problem), moves)
        reasons = scan(source, policy=policy, filename="candidate.py")
        assert not [r for r in reasons if r.severity == "reject"], [r.message for r in reasons]
    fp32_problem = load_problem(str(HERE / "matmul_fp32_aligned.py"))
    assert static_policy(fp32_problem, "fp32") == "fp32"
    source = render(capture(fp32_problem), {"template": "matmul_3xtf32"})
    assert "cutlass" in detect_backends(source)
    assert scan(source, policy="fp32", filename="candidate.py") == []
    # the TF32 WGMMA variant is offered under relaxed only, whose static policy allows TF32
    for kind in ("matmul_cutlass_tf32", "matmul_1xtf32"):
        source = render(capture(fp32_problem), {"template": kind}, precision="relaxed")
        reasons = scan(source, policy="relaxed", filename="candidate.py")
        assert not [r for r in reasons if r.severity == "reject"], [r.message for r in reasons]
    # one TF32 product is what the fp32 policy forbids: the scan names the tensor-core GEMM
    source = render(capture(fp32_problem), {"template": "matmul_1xtf32"}, precision="relaxed")
    assert [r.code for r in scan(source, policy="fp32", filename="candidate.py")] == ["precision_downgrade"]


def _fixture_maker():
    spec = importlib.util.spec_from_file_location("make_expert_cutlass_fixture",
                                                  FIXTURES / "make_expert_cutlass_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["expert_cutlass_bf16", "expert_3xtf32", "expert_cutlass_tf32", "expert_3xtf32_splitk",
                                  "expert_1xtf32_splitk"])
def test_the_fixtures_were_built_from_the_current_templates(name):
    recorded = json.loads((FIXTURES / f"{name}.json").read_text())
    maker = _fixture_maker()
    source = maker.kernel_source(name)
    assert hashlib.sha256(source.encode()).hexdigest() == recorded["kernel_sha256"], \
        "a CUTLASS template changed: run tests/kernels/profile_fixtures/make_expert_cutlass_fixture.py again"
    assert recorded["arch"] == "sm_90a"
    assert recorded["moves"] == default_moves(maker.pattern(name), recorded["template"])


def _fixture_kernel(name: str):
    from loopwise.kernels.profile.sass_tools import profile_cubin

    (kernel,) = [k for k in profile_cubin(FIXTURES / f"{name}.cubin").kernels if k.instructions > 100]
    assert kernel.local_loads == 0 and kernel.local_stores == 0  # no spills
    return kernel


def _needs_disassembler():
    from loopwise.kernels.profile import sass_tools

    try:
        sass_tools.find_tool("cuobjdump")
    except sass_tools.ToolNotFoundError:
        pytest.skip("no cuobjdump / nvdisasm (CUDA or Triton)")


def test_the_wgmma_variant_compiles_to_bf16_hgmma_with_tma():
    _needs_disassembler()
    kernel = _fixture_kernel("expert_cutlass_bf16")
    ops = {op.opcode: op for op in kernel.tensor_core}
    assert set(ops) == {"HGMMA"} and ops["HGMMA"].inputs == "BF16" and ops["HGMMA"].accumulator == "F32"
    assert ops["HGMMA"].shape == "64x256x16"  # a 128x256 tile over two consumer warp groups
    assert kernel.tma_copies > 0


def test_the_tf32_wgmma_variant_compiles_to_tf32_hgmma_with_tma():
    """Under relaxed, fp32 products on Hopper's WGMMA in TF32: HGMMA with TF32 inputs and fp32
    accumulators (the 128x256 tile over two consumer warp groups: 64x256 per instruction, K = 8)."""
    _needs_disassembler()
    kernel = _fixture_kernel("expert_cutlass_tf32")
    ops = {op.opcode: op for op in kernel.tensor_core}
    assert set(ops) == {"HGMMA"} and ops["HGMMA"].inputs == "TF32" and ops["HGMMA"].accumulator == "F32"
    assert ops["HGMMA"].shape == "64x256x8"
    assert kernel.tma_copies > 0


def test_the_3xtf32_variant_compiles_to_three_tf32_mmas_per_product():
    """A 32x64 warp tile over K = 32 is 2 x 8 x 4 = 64 HMMA.1688 per product; 3xTF32 issues three
    products (big*big, big*small, small*big) per k-step: 192."""
    _needs_disassembler()
    kernel = _fixture_kernel("expert_3xtf32")
    ops = {op.opcode: op for op in kernel.tensor_core}
    assert set(ops) == {"HMMA"} and ops["HMMA"].inputs == "TF32" and ops["HMMA"].accumulator == "F32"
    assert ops["HMMA"].shape == "1688"
    per_product = (32 // 16) * (64 // 8) * (32 // 8)
    assert kernel.tensor_core_instructions == 3 * per_product


def test_the_split_3xtf32_variant_is_the_same_products_and_one_reduction_kernel():
    """Split K ways (L1/6's shape, 64 ranges), the GEMM kernel issues the same 192 HMMA.1688 per
    K step as the unsplit one and spills nothing; CUTLASS's reduction kernel beside it sums the
    partials on the CUDA cores."""
    _needs_disassembler()
    from loopwise.kernels.profile.sass_tools import profile_cubin

    kernels = profile_cubin(FIXTURES / "expert_3xtf32_splitk.cubin").kernels
    (gemm,) = [k for k in kernels if "GemmSplitKParallel" in k.name]
    (reduction,) = [k for k in kernels if "ReduceSplitK" in k.name]
    assert {op.opcode for op in gemm.tensor_core} == {"HMMA"} and gemm.tensor_core_instructions == 192
    assert gemm.local_loads == gemm.local_stores == 0
    assert reduction.tensor_core_instructions == 0 and reduction.local_loads == reduction.local_stores == 0


def test_the_split_1xtf32_variant_issues_a_third_of_3xtf32s_products():
    """Under relaxed the same split GEMM with CUTLASS's OpMultiplyAdd: one TF32 product per k-step,
    64 HMMA.1688 (3xTF32: 192), no spills, and the same reduction kernel."""
    _needs_disassembler()
    from loopwise.kernels.profile.sass_tools import profile_cubin

    kernels = profile_cubin(FIXTURES / "expert_1xtf32_splitk.cubin").kernels
    (gemm,) = [k for k in kernels if "GemmSplitKParallel" in k.name]
    assert [k for k in kernels if "ReduceSplitK" in k.name]
    ops = {op.opcode: op for op in gemm.tensor_core}
    assert set(ops) == {"HMMA"} and ops["HMMA"].inputs == "TF32" and ops["HMMA"].shape == "1688"
    assert gemm.tensor_core_instructions == (32 // 16) * (64 // 8) * (32 // 8)
    assert gemm.local_loads == gemm.local_stores == 0


GPU_CASES = [  # (kind, dtype, trans_a, trans_b, m, knobs beyond the defaults)
    # every transpose of each variant once, defaults or knobs (each case is an extension of its own:
    # nvcc takes 1-2 minutes of one core per case, so the cases are as few as cover the layouts)
    *[("matmul_cutlass", "bfloat16", ta, ta, 1000, {}) for ta in (False, True)],
    ("matmul_cutlass", "bfloat16", False, False, 1001, {"tile": "64x128x64", "cluster": "1x2", "schedule": "pingpong"}),
    ("matmul_cutlass", "bfloat16", True, False, 1000, {"tile": "256x128x64", "cluster": "1x1"}),
    ("matmul_cutlass", "float16", False, True, 1000, {"tile": "128x128x64", "schedule": "pingpong"}),
    *[("matmul_3xtf32", "float32", ta, not ta, 1000, {}) for ta in (False, True)],
    ("matmul_3xtf32", "float32", True, True, 1000, {"tile": "64x256x32", "stages": 5}),
    ("matmul_3xtf32", "float32", False, False, 1001, {"tile": "256x64x32", "stages": 4}),
    # parallel split-K: K = 520 is 16 steps of 32, 2 per range but the last, which takes the rest
    ("matmul_3xtf32", "float32", False, False, 1001, {"split": 8}),
    ("matmul_3xtf32", "float32", True, True, 1000, {"tile": "64x64x32", "split": 4}),
    # one TF32 product (relaxed), split and not, transposed and not
    ("matmul_1xtf32", "float32", False, False, 1001, {"split": 8}),
    ("matmul_1xtf32", "float32", True, True, 1000, {"tile": "64x64x32", "split": 4}),
    ("matmul_1xtf32", "float32", True, False, 1000, {}),
    # K-major A and B as given (no copy), and both copied
    *[("matmul_cutlass_tf32", "float32", ta, not ta, 1001, {}) for ta in (False, True)],
    ("matmul_cutlass_tf32", "float32", False, False, 1000, {"tile": "64x128x32", "cluster": "1x1", "schedule": "pingpong"}),
]


@pytest.mark.gpu
def test_the_cutlass_variants_match_torch_on_the_gpu(tmp_path):
    """Non-square shapes, M not a multiple of any tile (1001 where A is not transposed: only the
    operands' contiguous extents need 16-byte alignment), all four transposes, several knobs; each
    output within one rounding to its type of the float64 product. LOOPWISE_GPU_CASES=kind,kind
    keeps the cases of those variants (each build takes a minute or two of nvcc)."""
    import os

    import torch

    from loopwise.kernels.backends import precompile, prepare_environment

    major, _ = torch.cuda.get_device_capability()
    if major != 9:
        pytest.skip("the WGMMA variant needs Hopper (sm_90a)")
    wanted = [kind for kind in os.environ.get("LOOPWISE_GPU_CASES", "").split(",") if kind]
    cases = [case for case in GPU_CASES if not wanted or case[0] in wanted]
    assert cases, f"LOOPWISE_GPU_CASES={wanted}: no case of those variants"
    n, k = 776, 520
    sources = [render(matmul_pattern(dtype, ta, tb, m, n, k), {"template": kind, **knobs})
               for kind, dtype, ta, tb, m, knobs in cases]
    extensions = tmp_path / "extensions"
    built = precompile(sources, str(extensions), "9.0")
    assert all(b.ok for b in built), built
    os.environ["TORCH_EXTENSIONS_DIR"] = str(extensions)
    prepare_environment({"arch": "9.0"}, "cuda:0")
    for i, ((kind, dtype, ta, tb, m, knobs), source) in enumerate(zip(cases, sources)):
        path = tmp_path / f"candidate_{i}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        gen = torch.Generator(device="cuda").manual_seed(i)
        a = torch.randn((k, m) if ta else (m, k), generator=gen, device="cuda").to(getattr(torch, dtype))
        b = torch.randn((n, k) if tb else (k, n), generator=gen, device="cuda").to(getattr(torch, dtype))
        out = module.ModelNew()(a, b)
        assert out.dtype == a.dtype and out.shape == (m, n), (kind, knobs)
        da, db = (a.double().t() if ta else a.double()), (b.double().t() if tb else b.double())
        if kind in ("matmul_cutlass_tf32", "matmul_1xtf32"):  # TF32 operands: within 2^-9 of sum |products|
            error = ((out.double() - da @ db).abs() / (da.abs() @ db.abs())).max().item()
            assert error < 2.0 ** -9, (kind, ta, tb, knobs, error)
            continue
        assert _rounding_excess(out, a, b, ta, tb) <= 1.0, (kind, dtype, ta, tb, knobs)
        if kind == "matmul_3xtf32":  # fp32-accurate: TF32 products (2^-11 each) would land near 2^-11 / sqrt(K)
            error = ((out.double() - da @ db).abs() / (da.abs() @ db.abs())).max().item()
            assert error < 2.0 ** -20, (kind, ta, tb, knobs, error)

