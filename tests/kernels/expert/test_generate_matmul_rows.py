"""A product of an N-d left operand and one matrix over the operand's last dimension
(``torch.einsum("bijl,lk->bijk", A, W)``, ``A @ W`` or ``torch.matmul(A, W)`` for a 3-d or 4-d A;
KernelBench L1/10 and L1/11) is the plain 2-D ``matmul`` kind: A's leading dimensions flattened
into M rows (a view of a contiguous A), C handed back with them, so the matrix product's variants
(split-K, K-major copies, CUTLASS 3xTF32 and WGMMA) apply instead of the batched kernel's. Judged
correct in Triton's CPU interpreter. Forms that are no product of A's rows (A read transposed, the
matrix on the left) stay ``bmm``. Inductor answers such a product with one library call and no
kernel of its own, so it has no compiler seed: the matmul variants are what the expert offers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopwise.core.propose import ProposalRequest
from loopwise.kernels.check import scan
from loopwise.kernels.expert import capture
from loopwise.kernels.expert.generate import default_moves, render, variants
from loopwise.kernels.expert.inductor.extract import InductorRecord
from loopwise.kernels.expert.proposer import ExpertProposer
from loopwise.kernels.problem import load_problem

from expert_judging import HERE, captured, judged_correct, judged_variant, problem_variant, tiered  # noqa: E402 - tests/kernels/expert on sys.path

FIXTURE = "tensor_matrix_4d.py"  # L1/11's forward at small, ragged sizes: 2 x 3 x 5 rows of 24, a 24 x 20 matrix
L1_11_SIZES = {"B = 2": "B = 8", "I = 3": "I = 256", "J = 5": "J = 512", "L = 24": "L = 256", "K = 20": "K = 768"}
SMALL = {"block": 16, "chunk": 16, "warps": 4}
KERNELBENCH = Path(__file__).parents[3] / "third_party" / "KernelBench" / "KernelBench" / "level1"
FORWARD = 'return torch.einsum("bijl,lk->bijk", A, W)'
INPUTS = "[torch.randn(B, I, J, L), torch.randn(L, K)]"


def _product(pattern) -> tuple:
    p = dict(pattern.params)
    return pattern.kind, p["m"], p["n"], p["k"], p.get("lead"), p["trans_a"], p["trans_b"]


def test_the_4d_tensor_matrix_product_is_the_matmul_kind_with_m_the_product_of_the_leading_dimensions(tmp_path):
    """At L1/11's sizes: M = 8 x 256 x 512 rows, N = 768, K = 256; the fp32 policy adds CUTLASS's
    3xTF32 beside the Triton template and relaxed WGMMA's TF32; the matrix (N-major for the
    product) is copied K-major by default, a copy of 0.8 MB next to a 1.6 TFLOP product."""
    pattern = captured(FIXTURE, L1_11_SIZES, tmp_path)
    assert _product(pattern) == ("matmul", 8 * 256 * 512, 768, 256, (8, 256, 512), False, False)
    assert variants(pattern, "fp32") == ["matmul", "matmul_3xtf32"]
    assert variants(pattern, "relaxed") == ["matmul", "matmul_cutlass_tf32"]
    assert {k: default_moves(pattern)[k] for k in ("split", "kmajor")} == {"split": 1, "kmajor": 1}


@pytest.mark.parametrize("name, product", [
    ("10_3D_tensor_matrix_multiplication", ("matmul", 16 * 1024, 768, 2048, (16, 1024), False, False)),
    ("11_4D_tensor_matrix_multiplication", ("matmul", 8 * 256 * 512, 768, 256, (8, 256, 512), False, False)),
])
def test_kernelbench_tensor_matrix_products_are_captured_as_matmul(name, product):
    path = KERNELBENCH / f"{name}.py"
    if not path.exists():
        pytest.skip(f"no KernelBench checkout at {KERNELBENCH}")
    assert _product(capture(load_problem(str(path)))) == product


def test_the_product_over_a_4d_operand_is_judged_correct(tmp_path, monkeypatch):
    """The Triton template flattens A's leading dimensions into rows and hands C back with them."""
    source = judged_correct(HERE / FIXTURE, SMALL, tmp_path, monkeypatch)
    assert "a = a.reshape(-1, a.shape[-1])" in source and "matmul_kernel[grid]" in source
    assert "return c.view(*rows, N)" in source


# (forward, inputs, moves, parameters captured): other spellings and the template's moves
SPELLINGS = [
    # torch.matmul of a 3-d A (L1/10's form)
    ("return torch.matmul(A, W)", "[torch.randn(3, 7, L), torch.randn(L, K)]", SMALL,
     {"m": 21, "lead": (3, 7), "trans_b": False}),
    # the matrix read transposed, in the equation and through .T
    ('return torch.einsum("bijl,kl->bijk", A, W)', "[torch.randn(B, I, J, L), torch.randn(K, L)]", SMALL,
     {"m": 30, "n": 20, "trans_b": True}),
    ("return A @ W.T", "[torch.randn(B, I, J, L), torch.randn(K, L)]", {**SMALL, "kmajor": 1}, {"trans_b": True}),
    # A not contiguous: the rows are copied by the reshape, the result the same
    (FORWARD, "[torch.randn(B, J, I, L).transpose(1, 2), torch.randn(L, K)]", SMALL, {"lead": (2, 3, 5)}),
    # the matrix copied K-major, and K split in two ranges
    (FORWARD, INPUTS, {**SMALL, "kmajor": 1}, {"trans_b": False}),
    (FORWARD, "[torch.randn(B, I, J, 64), torch.randn(64, K)]", {**SMALL, "split": 2}, {"k": 64}),
    # fp16 in its own type
    (FORWARD, "[torch.randn(B, I, J, L).half(), torch.randn(L, K).half()]", SMALL, {"dtype": "float16"}),
]


@pytest.mark.parametrize("forward, inputs, moves, params", tiered(SPELLINGS, fast=set()))
def test_other_spellings_and_moves_are_judged_correct(tmp_path, monkeypatch, forward, inputs, moves, params):
    pattern = judged_variant(tmp_path, monkeypatch, FIXTURE, "matmul", moves, {FORWARD: forward, INPUTS: inputs})
    assert {k: dict(pattern.params)[k] for k in params} == params


@pytest.mark.parametrize("forward, inputs", [
    # A read with its last two dimensions swapped: its rows are not contiguous runs of K
    ("return A.mT @ W", "[torch.randn(B, I, L, J), torch.randn(L, K)]"),
    # the matrix on the left: the rows come from W, a batch of them
    ("return torch.matmul(W, A)", "[torch.randn(B, I, L, J), torch.randn(K, L)]"),
])
def test_products_that_are_not_a_matrix_over_a_operands_rows_stay_batched(tmp_path, forward, inputs):
    path = problem_variant(tmp_path, FIXTURE, {FORWARD: forward, INPUTS: inputs})
    assert capture(load_problem(str(path))).kind == "bmm"


@pytest.mark.parametrize("kind, dtype", [("matmul_3xtf32", "float32"), ("matmul_cutlass", "float16")])
def test_the_cutlass_variants_flatten_the_rows_too(tmp_path, kind, dtype):
    """The CUDA C++ variants (built on a GPU only) read the same M x K view and return C with A's
    leading dimensions; the judge's static scan finds nothing in the fp32 one (half math is a
    precision downgrade to its fp32 policy whatever the operands)."""
    half = {"K = 20": "K = 16", INPUTS: "[torch.randn(B, I, J, L).half(), torch.randn(L, K).half()]"}  # 16-byte rows
    pattern = captured(FIXTURE, {} if dtype == "float32" else half, tmp_path)
    assert kind in variants(pattern)
    source = render(pattern, {"template": kind})
    compile(source, kind, "exec")
    assert "a = a.reshape(-1, a.shape[-1])" in source and ".view(*rows, -1)" in source
    if dtype == "float32":
        assert [r.code for r in scan(source) if r.severity != "info"] == []


def _library_only_record() -> InductorRecord:
    """Inductor's module for the product as torch.compile writes it: the rows flattened by
    reinterpret_tensor and one extern_kernels.bmm call, no Triton kernel."""
    module = (
        "from torch._inductor.select_algorithm import extern_kernels\n"
        "from torch._C import _cuda_getCurrentRawStream as get_raw_stream\n"
        "reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor\n\n"
        "def call(args):\n"
        "    arg0_1, arg1_1 = args\n"
        "    args.clear()\n"
        "    buf0 = empty_strided_cuda((1, 30, 20), (600, 20, 1), torch.float32)\n"
        "    extern_kernels.bmm(reinterpret_tensor(arg0_1, (1, 30, 24), (720, 24, 1), 0), "
        "reinterpret_tensor(arg1_1, (1, 24, 20), (480, 20, 1), 0), out=buf0)\n"
        "    del arg0_1\n    del arg1_1\n"
        "    return (reinterpret_tensor(buf0, (2, 3, 5, 20), (300, 100, 20, 1), 0),)\n")
    return InductorRecord(module=module, kernels=[], inputs=["arg:A", "arg:W"], outputs=0,
                          extern=["extern_kernels.bmm"])


def test_where_inductor_leaves_the_product_to_cublas_the_seed_is_its_gemm_move_after_the_matmul_template(tmp_path):
    """Inductor's code is one library call, no kernel of its own (a candidate of it alone would be
    rejected as pytorch_only): the seed is written with the gemm move (the call as a Triton GEMM),
    proposed after the expert's own first matrix-product template and before its next variant."""
    from loopwise.kernels.expert.inductor.standalone import parse_note

    problem = load_problem(str(problem_variant(tmp_path, FIXTURE, L1_11_SIZES)))
    proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: _library_only_record())
    first = proposer.propose(ProposalRequest(task="", candidate="", n=3))
    assert [p.content.split(":", 1)[0] for p in first] == ['"""matmul', '"""inductor', '"""matmul_3xtf32']
    assert parse_note(first[1].content)["gemm"] == 1 and "extern_kernels.bmm(" not in first[1].content
    assert all("no compiler seed" not in p.note for p in first)
    children = proposer.propose(ProposalRequest(task="", candidate=first[1].content, n=2))
    assert all(parse_note(c.content)["gemm"] == 1 for c in children if c.content.startswith('"""inductor'))


@pytest.mark.slow
def test_inductor_answers_the_product_with_one_library_call(tmp_path):
    """torch.compile on the CPU, in a process of its own as the proposer runs it: the einsum becomes
    one library bmm over the flattened rows and no kernel of Inductor's own (the same aten graph
    that a GPU compiles to extern_kernels.bmm)."""
    out = tmp_path / "record.json"
    done = subprocess.run([sys.executable, "-m", "loopwise.kernels.expert.inductor.extract", str(HERE / FIXTURE),
                           str(out), "--device", "cpu"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert done.returncode == 0, done.stderr[-2000:]
    record = InductorRecord.from_json(out.read_text())
    assert record.kernels == [] and record.extern == ["extern_kernels.bmm"]
