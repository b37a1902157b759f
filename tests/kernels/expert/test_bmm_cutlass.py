"""The batched matrix product's CUTLASS 3 variant beside its Triton template: the matrix product's
WGMMA kernel in CUTLASS 3's batched mode (bf16 / fp16, and fp32 in TF32 under relaxed), offered
where every operand's rows and every batch entry start on 16-byte boundaries. On the CPU: what is
offered, what the rendered source says, that the judge's static scan accepts it, and that the
proposer offers it and reads its moves back. test_bmm_cutlass_compiled.py compiles it and runs it."""

from __future__ import annotations

import ast
import itertools

import pytest

from loopwise.core.propose import FindingNote, ProposalRequest
from loopwise.kernels.expert import capture, matmul_variants
from loopwise.kernels.expert.generate import default_moves, render, variants
from loopwise.kernels.expert.proposer import SPACE, ExpertProposer, suggested_moves
from loopwise.kernels.problem import load_problem

from expert_judging import bmm_pattern, generated_style_problem, matmul_pattern  # noqa: E402 - tests/kernels/expert on sys.path


def _string(source: str, name: str) -> str:
    """The module-level string ``name`` of a rendered candidate, read without importing it."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} string")


def _all_moves(kind: str) -> list[dict]:
    """Every knob combination of ``kind`` that CUTLASS builds."""
    names = list(SPACE[kind])
    combos = (dict(zip(names, values)) for values in itertools.product(*SPACE[kind].values()))
    return [{"template": kind, **m} for m in combos if matmul_variants.valid(kind, m)]


def weight_problem(tmp_path, dtype: str = "float16", forward: str = "x = torch.bmm(x, self.w1)",
                   weight: str = "9, 512, 2048", inputs: str = "9, 1024, 512"):
    """A generated-suite style batched product of the input and the model's own weight."""
    return load_problem(str(generated_style_problem(
        tmp_path, "bmm_weight", f"self.w1 = nn.Parameter(torch.randn({weight}))\nself.to(DTYPE)", forward,
        f"torch.randn({inputs}, dtype=DTYPE)", dtype)))


def test_the_variant_is_offered_where_dtype_policy_and_alignment_allow(tmp_path):
    """bf16 / fp16 under either policy; fp32 only under relaxed (TF32), never under fp32 (no
    fp32-accurate batched variant); never where an operand's contiguous extent is not a whole
    number of 16-byte vectors (so neither its rows nor its entries would start aligned)."""
    for dtype in ("bfloat16", "float16"):
        for policy in ("fp32", "relaxed"):
            assert variants(bmm_pattern(dtype), policy) == ["bmm", "bmm_cutlass"]
    assert variants(bmm_pattern("float32"), "fp32") == ["bmm"]
    assert variants(bmm_pattern("float32"), "relaxed") == ["bmm", "bmm_cutlass_tf32"]
    assert variants(bmm_pattern("float16", k=100), "fp32") == ["bmm"]  # A's rows of 100 halves
    assert variants(bmm_pattern("float16", n=36), "fp32") == ["bmm"]  # B's and C's rows
    assert variants(bmm_pattern("float16", trans_a=True, m=60), "fp32") == ["bmm"]  # A held [K, M]
    assert variants(bmm_pattern("float16", m=60), "fp32") == ["bmm", "bmm_cutlass"]  # M is no row's extent
    assert variants(bmm_pattern("float16", trans_b=True, shared_b=True, k=72), "fp32") == ["bmm", "bmm_cutlass"]
    assert variants(bmm_pattern("float32", k=66), "relaxed") == ["bmm"]  # TF32 reads both K-major: K and N count
    assert variants(bmm_pattern("float32", trans_a=True, m=61), "relaxed") == ["bmm", "bmm_cutlass_tf32"]
    # each kind its own pattern: a matrix product's variants are not a batch's, nor the reverse
    assert not matmul_variants.accepts("bmm_cutlass", matmul_pattern("float16"))
    assert not matmul_variants.accepts("matmul_cutlass", bmm_pattern("float16"))
    with pytest.raises(ValueError, match="does not apply"):
        render(bmm_pattern("float16", k=100), {"template": "bmm_cutlass"})
    with pytest.raises(ValueError, match="does not apply"):
        render(bmm_pattern("float32"), {"template": "bmm_cutlass"})
    # the generated suite's spelling, a batch of inputs times the model's weight
    assert variants(capture(weight_problem(tmp_path)), "fp32") == ["bmm", "bmm_cutlass"]


def test_the_batched_kernel_is_the_matrix_products_with_a_batch():
    """For the same knobs, dtype and transposes the batched variant compiles the matrix product's
    CUTLASS kernel text: only the arguments differ (a batch count, CUTLASS 3's batched mode, a
    batch stride per operand where the plain product has 0)."""
    for (ta, tb), dtype in itertools.product(itertools.product((False, True), repeat=2), ("bfloat16", "float16")):
        for moves in _all_moves("bmm_cutlass"):
            batched = _string(render(bmm_pattern(dtype, ta, tb), moves), "KERNEL")
            plain = _string(render(matmul_pattern(dtype, ta, tb), {**moves, "template": "matmul_cutlass"}), "KERNEL")
            head, tail = "using Gemm = ", "// 0 on success"
            assert batched.split(head)[0] == plain.split(head)[0] and batched.split(tail)[1] == plain.split(tail)[1]
            assert "GemmUniversalMode::kBatched, {m, n, k, batches}" in batched
            assert "GemmUniversalMode::kGemm, {m, n, k, 1}" in plain
            for operand in "abc":
                assert f"batch_{operand})" in batched and f"batch_{operand}" not in plain
    tf32 = _string(render(bmm_pattern("float32", True, False), {"template": "bmm_cutlass_tf32"}, "relaxed"), "KERNEL")
    plain = _string(render(matmul_pattern("float32", True, False), {"template": "matmul_cutlass_tf32"}, "relaxed"),
                    "KERNEL")
    assert tf32.split("using Gemm = ")[0] == plain.split("using Gemm = ")[0]
    assert "using Element = float;" in tf32 and "LayoutB = cutlass::layout::ColumnMajor;" in tf32


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("trans_a,trans_b,shared_a,shared_b", [
    (False, False, False, False), (True, False, False, False), (False, True, False, False), (True, True, False, False),
    (False, True, False, True), (True, False, True, False)])
def test_rendered_sources_read_every_operand_in_place(dtype, trans_a, trans_b, shared_a, shared_b):
    """Transposed operands through column-major layouts, a shared one as one entry of batch stride
    0: views, never copies; the glue checks what TMA needs of every operand and entry."""
    pattern = bmm_pattern(dtype, trans_a, trans_b, shared_a, shared_b)
    source = render(pattern, {"template": "bmm_cutlass"})
    assert source.startswith('"""bmm_cutlass: tile 128x256x64, cluster 2x1, schedule cooperative\n')
    ast.parse(source)
    kernel, glue = _string(source, "KERNEL"), _string(source, "GLUE")
    assert f"LayoutA = cutlass::layout::{'ColumnMajor' if trans_a else 'RowMajor'};" in kernel
    assert f"LayoutB = cutlass::layout::{'ColumnMajor' if trans_b else 'RowMajor'};" in kernel
    assert ("cutlass::bfloat16_t" if dtype == "bfloat16" else "cutlass::half_t") in kernel
    assert f"strides(a, {'false' if trans_a else 'true'}, \"op(A)\")" in glue
    assert f"strides(b, {'false' if trans_b else 'true'}, \"op(B)\")" in glue
    assert ("torch::kBFloat16" if dtype == "bfloat16" else "torch::kHalf") in glue
    # what TMA needs, checked before CUTLASS sees the pointers: device and dtype, sizes, unit-stride
    # rows whose extent and leading dimension are 16-byte vectors, 16-byte aligned starts and batch
    # strides (every entry's start), an operand of one entry read by every product
    for check in ("a.is_cuda() && b.is_cuda() && a.device() == b.device()", "a.size(2) == b.size(1)",
                  "a.size(0) == b.size(0) || a.size(0) == 1 || b.size(0) == 1", "t.stride(inner) == 1",
                  "extent % lw::kAlign == 0 && ld % lw::kAlign == 0", "batch % lw::kAlign == 0",
                  "reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0", "t.size(0) == 1 ? 0 : t.stride(0)",
                  "<= INT_MAX"):
        assert check in glue, check
    assert f"a = a.transpose(-1, -2) if {trans_a} else a" in source
    assert f"b = b.transpose(-1, -2) if {trans_b} else b" in source
    assert "_ext.lw_bmm(a.reshape(-1, M, K), b.reshape(-1, K, N))" in source
    assert "return c.reshape(*batch_shape, M, N)" in source
    assert ".contiguous()" not in source
    shared = "A shared by every batch entry" if shared_a else "B shared by every batch entry" if shared_b else None
    assert shared is None or shared in source


def test_the_tf32_variant_copies_operands_k_major_first():
    """WGMMA reads TF32 operands K-major only: A as [..., M, K] row-major, B held as [..., N, K]
    (no copy where an operand is so already)."""
    source = render(bmm_pattern("float32", trans_a=True), {"template": "bmm_cutlass_tf32"}, "relaxed")
    assert source.startswith('"""bmm_cutlass_tf32: tile 128x256x32, cluster 2x1, schedule cooperative\n')
    assert "in TF32 (the relaxed precision policy" in source
    assert "a = a.contiguous()" in source and "b = b.transpose(-1, -2).contiguous().transpose(-1, -2)" in source
    assert 'strides(a, true, "op(A)")' in _string(source, "GLUE") and 'strides(b, false, "op(B)")' in _string(source, "GLUE")


def test_the_models_weight_is_read_from_the_copied_init(tmp_path):
    """``torch.bmm(x, self.w1)`` with the weight made in DTYPE (the generated suite's spelling):
    ModelNew keeps the reference's __init__ and the module-level DTYPE it reads."""
    source = render(capture(weight_problem(tmp_path)), {"template": "bmm_cutlass"})
    assert "self.w1 = nn.Parameter(" in source and "DTYPE = torch.float16" in source
    assert "b = self.w1.to(x0.device)" in source and "def forward(self, x0):" in source
    shared = render(capture(weight_problem(tmp_path, forward="x = x @ self.w1.transpose(-1, -2)", weight="2048, 512")),
                    {"template": "bmm_cutlass"})
    assert "B shared by every batch entry" in shared and "LayoutB = cutlass::layout::ColumnMajor;" in shared


def test_extensions_are_named_by_what_they_compile():
    """load_inline caches a module by name in a process: each kind, dtype, layout and knob
    combination its own name, and a batch's never a matrix product's."""
    names = set()
    for (ta, tb), dtype in itertools.product(itertools.product((False, True), repeat=2), ("bfloat16", "float16")):
        for moves in _all_moves("bmm_cutlass"):
            names.add(render(bmm_pattern(dtype, ta, tb), moves).split('load_inline(name="')[1].split('"')[0])
            names.add(render(matmul_pattern(dtype, ta, tb), {**moves, "template": "matmul_cutlass"})
                      .split('load_inline(name="')[1].split('"')[0])
    assert len(names) == 2 * 4 * 2 * len(_all_moves("bmm_cutlass"))


def test_the_judges_static_scan_accepts_the_candidate(tmp_path):
    """CUTLASS is the candidate's own code (it calls no torch.bmm); half types are the problem's
    own precision, TF32 the relaxed policy's."""
    from loopwise.kernels.check import detect_backends, scan
    from loopwise.kernels.evaluate.verdict import static_policy

    problem = weight_problem(tmp_path)
    policy = static_policy(problem, "fp32")
    source = render(capture(problem), {"template": "bmm_cutlass"})
    assert "cutlass" in detect_backends(source) and "torch.bmm" not in source and "matmul(" not in source
    reasons = scan(source, policy=policy, filename="candidate.py")
    assert not [r for r in reasons if r.severity == "reject"], [r.message for r in reasons]
    fp32 = weight_problem(tmp_path, dtype="float32")
    source = render(capture(fp32), {"template": "bmm_cutlass_tf32"}, precision="relaxed")
    reasons = scan(source, policy="relaxed", filename="candidate.py")
    assert not [r for r in reasons if r.severity == "reject"], [r.message for r in reasons]


def test_moves_are_read_back_from_every_source():
    """A resumed run knows a candidate's variant and knobs from its first line."""
    for kind, dtype, precision in (("bmm_cutlass", "float16", "fp32"), ("bmm_cutlass_tf32", "float32", "relaxed")):
        for moves in _all_moves(kind):
            source = render(bmm_pattern(dtype, trans_b=True, shared_b=True), moves, precision)
            assert source.startswith(f'"""{kind}: ' + matmul_variants.note(kind, moves)[len(kind) + 2:] + "\n")
            assert ExpertProposer._parse_moves(source) == moves


def test_the_proposer_offers_the_variant_from_the_reference(tmp_path):
    """An aligned fp16 batch: the Triton template and the CUTLASS variant's defaults first, as
    siblings; an fp32 one under the fp32 policy: the Triton template alone."""
    expert = ExpertProposer(weight_problem(tmp_path), seed=0)
    first = expert.propose(ProposalRequest(task="", n=2))
    assert [p.note for p in first] == ["bmm template, block 128, chunk 32, warps 8",
                                       "bmm_cutlass template, cluster 2x1, schedule cooperative, tile 128x256x64"]
    assert default_moves(expert.pattern, "bmm_cutlass") == matmul_variants.DEFAULT_MOVES["bmm_cutlass"]
    fp32 = ExpertProposer(weight_problem(tmp_path, dtype="float32"), seed=0)
    assert all(p.content.startswith('"""bmm: ') for p in fp32.propose(ProposalRequest(task="", n=6)))
    relaxed = ExpertProposer(weight_problem(tmp_path, dtype="float32"), seed=0, precision="relaxed")
    assert relaxed.propose(ProposalRequest(task="", n=2))[1].content.startswith('"""bmm_cutlass_tf32: ')


def test_the_search_moves_the_variants_knobs(tmp_path):
    """From a CUTLASS candidate: neighbours of its knobs that CUTLASS builds, within the variant;
    reduce_registers steps its tile down."""
    expert = ExpertProposer(weight_problem(tmp_path), seed=1)
    _, cutlass = expert.propose(ProposalRequest(task="", n=2))
    children = expert.propose(ProposalRequest(task="", candidate=cutlass.content, n=6))
    moves = [ExpertProposer._parse_moves(c.content) for c in children]
    cutlass_moves = [m for m in moves if m["template"] == "bmm_cutlass"]
    assert len(cutlass_moves) >= 4 and all(matmul_variants.valid("bmm_cutlass", m) for m in cutlass_moves)
    assert {(m["tile"], m["cluster"], m["schedule"]) for m in cutlass_moves[:4]} == {
        ("256x128x64", "2x1", "cooperative"), ("128x256x64", "1x1", "cooperative"),
        ("128x256x64", "1x2", "cooperative"), ("64x256x64", "2x1", "pingpong")}
    regs = (FindingNote(text="[low] register_spills: ...", evidence={"moves": "reduce_registers"}),)
    current = {"template": "bmm_cutlass", **matmul_variants.DEFAULT_MOVES["bmm_cutlass"]}
    assert suggested_moves(regs, "bmm_cutlass", current) == [{"tile": "128x128x64"}]
