"""The expert's CUDA C++ path for matrix products: bf16 / fp16 products get a CUTLASS 3 WGMMA variant,
fp32 products a CUTLASS 2 3xTF32 one under the fp32 policy and a TF32 WGMMA one under relaxed,
beside the Triton template, where
every operand's rows are whole 16-byte vectors. On the CPU: what is captured and offered, how the
proposer moves within and between variants, what the rendered C++ says, that the judge's static
scan accepts it, and (from committed cubins, made by
profile_fixtures/make_expert_cutlass_fixture.py) which tensor-core instructions the default moves
compile to. The GPU test runs the variants against torch."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopwise.core.propose import FindingNote, ProposalRequest
from loopwise.kernels.expert import capture, matmul_variants
from loopwise.kernels.expert.pattern import Pattern
from loopwise.kernels.expert.generate import DEFAULT_MOVES, default_moves, fits, render, variants
from loopwise.kernels.expert.proposer import SPACE, ExpertProposer, suggested_moves
from loopwise.kernels.problem import load_problem

HERE = Path(__file__).parents[1] / "expert_problems"
FIXTURES = Path(__file__).parents[1] / "profile_fixtures"


def _pattern(name: str, replacements: dict[str, str] | None = None, tmp_path: Path | None = None) -> Pattern:
    path = HERE / name
    if replacements:
        source = path.read_text()
        for old, new in replacements.items():
            assert old in source, (name, old)
            source = source.replace(old, new)
        path = tmp_path / f"variant_{name}"
        path.write_text(source)
    return capture(load_problem(str(path)))


def _matmul(dtype: str, trans_a: bool = False, trans_b: bool = False, m: int = 256, n: int = 128, k: int = 64):
    return Pattern("matmul", inputs=2, ops=("matmul",),
                   params=(("trans_a", trans_a), ("trans_b", trans_b), ("m", m), ("n", n), ("k", k), ("dtype", dtype)))


def _kernel(source: str) -> str:
    """The KERNEL string of a rendered CUTLASS candidate, read without importing it."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["KERNEL"]:
            return ast.literal_eval(node.value)
    raise AssertionError("no KERNEL string")


def _all_moves(kind: str) -> list[dict]:
    """Every knob combination of ``kind`` that CUTLASS builds."""
    names = list(SPACE[kind])
    combos = (dict(zip(names, values)) for values in itertools.product(*SPACE[kind].values()))
    return [{"template": kind, **m} for m in combos if matmul_variants.valid(kind, m)]


def test_products_the_triton_template_splits_along_k_get_only_the_cutlass_variant_that_splits():
    """The WGMMA variants have no split-K: a product with few output tiles and a long K, which
    the Triton template splits, would leave most SMs idle in them (KernelBench L1/6, 256 x 256 out
    of K = 524288, on the H200: unsplit 3xTF32 0.04x eager, TF32 WGMMA 0.09-0.14x, against the
    split Triton template's 0.68x / 1.53x), and each costs a minute of nvcc. The mma.sync kernels
    (3xTF32 under fp32, one TF32 product under relaxed) split K by the same rule as the Triton
    template; where K is not split, relaxed keeps WGMMA's TF32 alone."""
    skinny = _matmul("float32", m=256, n=256, k=524288)
    assert variants(skinny, "relaxed") == ["matmul", "matmul_1xtf32"]
    assert default_moves(skinny, "matmul_1xtf32", "relaxed") == {"tile": "128x128x32", "stages": 3, "split": 64}
    assert render(skinny, {"template": "matmul_1xtf32"}, precision="relaxed").startswith(
        '"""matmul_1xtf32: tile 128x128x32, stages 3, split 64\n')
    assert variants(_matmul("bfloat16", m=256, n=256, k=524288), "relaxed") == ["matmul"]
    # 3xTF32 splits K too: 4 tiles of 128 x 128, K split 64 ways (256 programs, 8192 of K each)
    assert variants(skinny, "fp32") == ["matmul", "matmul_3xtf32"]
    assert default_moves(skinny, "matmul_3xtf32") == {"tile": "128x128x32", "stages": 3, "split": 64}
    assert render(skinny, {"template": "matmul_3xtf32"}).startswith(
        '"""matmul_3xtf32: tile 128x128x32, stages 3, split 64\n')
    # a split only where the tiles leave SMs idle: not for L1/16's 512 tiles, and not past two waves
    assert not fits(_matmul("float32", m=2048, n=4096, k=8192), {"template": "matmul_3xtf32", **DEFAULT_MOVES["matmul_3xtf32"], "split": 2})
    assert not fits(skinny, {"template": "matmul_3xtf32", "tile": "64x64x32", "stages": 3, "split": 64})  # 1024 programs
    assert fits(skinny, {"template": "matmul_3xtf32", "tile": "64x64x32", "stages": 3, "split": 32})
    square = _matmul("float32", m=2048, n=4096, k=8192)  # L1/16: 512 tiles, no split
    assert variants(square, "fp32") == ["matmul", "matmul_3xtf32"]
    assert variants(square, "relaxed") == ["matmul", "matmul_cutlass_tf32"]
    assert fits(skinny, {"template": "matmul_1xtf32", "tile": "64x64x32", "stages": 3, "split": 32})
    assert not fits(skinny, {"template": "matmul_1xtf32", "tile": "64x64x32", "stages": 3, "split": 64})


def test_capture_records_the_operand_dtype_of_matrix_products(tmp_path):
    bf16 = dict(_pattern("matmul_bf16.py").params)
    assert bf16 == {"trans_a": False, "trans_b": False, "m": 72, "n": 40, "k": 96, "dtype": "bfloat16"}
    fp16 = _pattern("matmul_fp16_at_bt.py")
    assert dict(fp16.params) == {"trans_a": True, "trans_b": True, "m": 60, "n": 56, "k": 48, "dtype": "float16"}
    assert dict(_pattern("matmul_plain.py").params)["dtype"] == "float32"
    mixed = _pattern("matmul_bf16.py", {"torch.randn(K, N, dtype=torch.bfloat16)": "torch.randn(K, N)"}, tmp_path)
    assert mixed.kind == "unsupported"  # one bf16 and one fp32 operand: no template


def test_variants_follow_dtype_precision_and_alignment(tmp_path):
    """CUTLASS reads 16-byte vectors: a variant is offered only where each operand's contiguous
    extent (K of A, N of B and C; M of A and K of B when they are transposed) is a multiple of 8
    16-bit or 4 fp32 elements. 3xTF32 only under the fp32 policy, where Triton's TF32 is not allowed."""
    bf16 = _pattern("matmul_bf16.py")
    assert variants(bf16, "fp32") == variants(bf16, "relaxed") == ["matmul", "matmul_cutlass"]
    assert variants(_pattern("matmul_bf16_odd.py"), "fp32") == ["matmul"]  # K = 100
    assert variants(_pattern("matmul_fp16_at_bt.py"), "fp32") == ["matmul"]  # M = 60 is A's contiguous extent
    aligned = _pattern("matmul_fp16_at_bt.py", {"M = 60": "M = 64"}, tmp_path)
    assert variants(aligned, "fp32") == ["matmul", "matmul_cutlass"]
    fp32 = _pattern("matmul_fp32_aligned.py")
    assert variants(fp32, "fp32") == ["matmul", "matmul_3xtf32"]
    assert variants(fp32, "relaxed") == ["matmul", "matmul_cutlass_tf32"]
    assert variants(_pattern("matmul_plain.py"), "fp32") == ["matmul"]  # N = 33
    assert variants(_pattern("matmul_plain.py"), "relaxed") == ["matmul"]
    # TF32 WGMMA reads both operands K-major after the copies: K and N must be whole 16-byte rows,
    # whatever the transposes (M of a transposed A does not matter, unlike the in-place variants)
    assert matmul_variants.accepts("matmul_cutlass_tf32", _matmul("float32", trans_a=True, m=1001, n=776, k=520))
    assert not matmul_variants.accepts("matmul_cutlass_tf32", _matmul("float32", m=1000, n=776, k=522))
    assert not matmul_variants.accepts("matmul_cutlass_tf32", _matmul("bfloat16"))
    assert variants(_pattern("chain.py"), "fp32") == ["elementwise"]
    assert variants(_pattern("unsupported_conv.py"), "fp32") == []
    # M needs no alignment where A is not transposed (TMA and the predicated loads cover the rows)
    assert matmul_variants.accepts("matmul_cutlass", _matmul("bfloat16", m=1001, n=776, k=520))
    assert not matmul_variants.accepts("matmul_cutlass", _matmul("bfloat16", trans_a=True, m=1001, n=776, k=520))
    assert not matmul_variants.accepts("matmul_3xtf32", _matmul("bfloat16"))
    assert not matmul_variants.accepts("matmul_1xtf32", _matmul("bfloat16"))
    assert variants(_pattern("matmul_bf16.py"), "relaxed") == ["matmul", "matmul_cutlass"]


def test_knob_combinations_are_those_cutlass_builds():
    """Cooperative splits a tile's M over two warp groups of 64-row WGMMAs (M a multiple of 128);
    no consumer thread holds more than 128 fp32 accumulators; 3xTF32's stages fit shared memory."""
    cutlass = {(m["tile"], m["schedule"]) for m in _all_moves("matmul_cutlass")}
    assert cutlass == {("128x128x64", "cooperative"), ("128x256x64", "cooperative"), ("256x128x64", "cooperative"),
                       ("64x128x64", "pingpong"), ("128x128x64", "pingpong"), ("64x256x64", "pingpong")}
    assert len(_all_moves("matmul_cutlass")) == 6 * len(matmul_variants.CLUSTERS)
    tf32 = {(m["tile"], m["schedule"]) for m in _all_moves("matmul_cutlass_tf32")}
    assert tf32 == {(tile.replace("x64", "x32"), schedule) for tile, schedule in cutlass}
    assert len(_all_moves("matmul_3xtf32")) == (len(matmul_variants.TF32X3_TILES) * len(matmul_variants.TF32X3_STAGES)
                                                * len(matmul_variants.TF32X3_SPLITS))
    assert _all_moves("matmul_1xtf32") == [{**m, "template": "matmul_1xtf32"} for m in _all_moves("matmul_3xtf32")]
    assert all(matmul_variants.valid(kind, DEFAULT_MOVES[kind]) for kind in matmul_variants.LIBRARY_KINDS)
    with pytest.raises(ValueError, match="does not apply"):
        render(_matmul("bfloat16"), {"template": "matmul_cutlass", "tile": "64x128x64", "schedule": "cooperative"})
    with pytest.raises(ValueError, match="does not apply"):
        render(_matmul("float32"), {"template": "matmul_cutlass"})  # fp32 has no WGMMA variant here


def test_rendered_sources_are_python_whose_kernel_names_the_knobs_cutlass_types():
    names = set()
    for (trans_a, trans_b), dtype in itertools.product(itertools.product((False, True), repeat=2),
                                                       ("bfloat16", "float16")):
        for moves in _all_moves("matmul_cutlass"):
            source = render(_matmul(dtype, trans_a, trans_b), moves)
            ast.parse(source)
            kernel = _kernel(source)
            tm, tn, tk = matmul_variants.dims(moves["tile"])
            cm, cn = matmul_variants.dims(moves["cluster"])
            schedule = "Cooperative" if moves["schedule"] == "cooperative" else "Pingpong"
            epilogue = "TmaWarpSpecializedCooperative" if schedule == "Cooperative" else "TmaWarpSpecialized>"
            assert f"Shape<_{tm}, _{tn}, _{tk}>" in kernel and f"Shape<_{cm}, _{cn}, _1>" in kernel
            assert f"cutlass::gemm::KernelTmaWarpSpecialized{schedule}>" in kernel
            assert f"cutlass::epilogue::{epilogue}" in kernel
            assert ("cutlass::bfloat16_t" if dtype == "bfloat16" else "cutlass::half_t") in kernel
            assert f"LayoutA = cutlass::layout::{'ColumnMajor' if trans_a else 'RowMajor'};" in kernel
            assert f"LayoutB = cutlass::layout::{'ColumnMajor' if trans_b else 'RowMajor'};" in kernel
            assert f"a = a.t() if {trans_a} else a" in source and ".contiguous()" not in source
            names.add(source.split('load_inline(name="')[1].split('"')[0])
        for moves in _all_moves("matmul_3xtf32") + _all_moves("matmul_1xtf32"):
            source = render(_matmul("float32", trans_a, trans_b), moves)
            ast.parse(source)
            kernel = _kernel(source)
            tm, tn, tk = matmul_variants.dims(moves["tile"])
            wm, wn = matmul_variants.TF32X3_WARPS[moves["tile"]]
            assert f"GemmShape<{tm}, {tn}, {tk}>" in kernel and f"GemmShape<{tm // wm}, {tn // wn}, {tk}>" in kernel
            # 3xTF32's operator, or one TF32 product (CUTLASS's OpMultiplyAdd on float operands)
            operator = "OpMultiplyAddFastF32" if moves["template"] == "matmul_3xtf32" else "OpMultiplyAdd"
            assert ("FastF32" in source) == (operator == "OpMultiplyAddFastF32")
            if moves["split"] == 1:  # the plain GEMM
                assert f"{moves['stages']}, kAlign, kAlign, false, cutlass::arch::{operator}>" in kernel
                assert "GemmSplitKParallel" not in kernel and "kSplit" not in kernel
            else:  # parallel split-K: partials, then CUTLASS's reduction kernel
                assert "cutlass::gemm::device::GemmSplitKParallel<" in kernel
                assert f"{moves['stages']}, kAlign, kAlign, cutlass::arch::{operator}>" in kernel
                assert f"constexpr int kSplit = {moves['split']};" in kernel and "{1.0f, 0.0f}, kSplit }" in kernel
                assert f"K is split {moves['split']} ways" in source
            assert "cutlass::arch::Sm80" in kernel and "cutlass::arch::OpClassTensorOp" in kernel
            names.add(source.split('load_inline(name="')[1].split('"')[0])
        for moves in _all_moves("matmul_cutlass_tf32"):
            source = render(_matmul("float32", trans_a, trans_b), moves)
            ast.parse(source)
            kernel = _kernel(source)
            tm, tn, tk = matmul_variants.dims(moves["tile"])
            assert f"Shape<_{tm}, _{tn}, _{tk}>" in kernel and "using Element = float;" in kernel
            # both operands K-major whatever the problem's transposes: A row-major, B column-major
            assert "LayoutA = cutlass::layout::RowMajor;" in kernel and "LayoutB = cutlass::layout::ColumnMajor;" in kernel
            assert "a = a.contiguous()" in source and "b = b.t().contiguous().t()" in source
            assert "in TF32 (the relaxed precision policy" in source
            names.add(source.split('load_inline(name="')[1].split('"')[0])
    # load_inline caches a module by name in a process: every build gets its own
    assert len(names) == 4 * (2 * len(_all_moves("matmul_cutlass")) + 2 * len(_all_moves("matmul_3xtf32"))
                              + len(_all_moves("matmul_cutlass_tf32")))


def test_moves_are_read_back_from_every_variants_source():
    """A resumed run knows a candidate's variant and knobs from its first line."""
    for kind in matmul_variants.LIBRARY_KINDS:
        pattern = _matmul("bfloat16" if kind == "matmul_cutlass" else "float32", trans_b=True)
        for moves in _all_moves(kind):
            assert ExpertProposer._parse_moves(render(pattern, moves)) == moves
    triton = render(_matmul("bfloat16"), {"block": 64, "warps": 4, "chunk": 16})
    assert ExpertProposer._parse_moves(triton) == {"template": "matmul", "block": 64, "warps": 4, "chunk": 16,
                                                   "split": 1, "kmajor": 0}
    assert render(_matmul("bfloat16")).startswith('"""matmul: block 128, 8 warps, chunk 32\n')


def test_from_the_reference_every_backend_is_proposed_first():
    bf16 = ExpertProposer(load_problem(str(HERE / "matmul_bf16.py")), seed=0)
    first = bf16.propose(ProposalRequest(task="", n=2))
    assert [p.note for p in first] == ["matmul template, block 128, chunk 32, kmajor 0, split 1, warps 8",
                                       "matmul_cutlass template, cluster 2x1, schedule cooperative, tile 128x256x64"]
    fp32 = ExpertProposer(load_problem(str(HERE / "matmul_fp32_aligned.py")), seed=0)
    second = fp32.propose(ProposalRequest(task="", n=2))[1]
    assert second.content.startswith('"""matmul_3xtf32: tile 128x128x32, stages 3')
    relaxed = ExpertProposer(load_problem(str(HERE / "matmul_fp32_aligned.py")), seed=0, precision="relaxed")
    first = relaxed.propose(ProposalRequest(task="", n=2))
    assert first[0].content.startswith('"""matmul: ')
    assert first[1].content.startswith('"""matmul_cutlass_tf32: tile 128x256x32, cluster 2x1, schedule cooperative')
    odd = ExpertProposer(load_problem(str(HERE / "matmul_bf16_odd.py")), seed=0)
    assert all(p.content.startswith('"""matmul: ') for p in odd.propose(ProposalRequest(task="", n=6)))


def test_a_candidate_is_moved_within_its_variant_or_to_another_backends_defaults():
    problem = load_problem(str(HERE / "matmul_bf16.py"))
    expert = ExpertProposer(problem, seed=3)
    (triton,) = expert.propose(ProposalRequest(task="", n=1))
    children = expert.propose(ProposalRequest(task="", candidate=triton.content, n=8))
    kinds = [ExpertProposer._parse_moves(c.content)["template"] for c in children]
    assert kinds.count("matmul_cutlass") == 1 and children[kinds.index("matmul_cutlass")].note.startswith(
        "matmul -> matmul_cutlass template")  # the other backend's defaults, not yet tried
    cutlass = children[kinds.index("matmul_cutlass")]
    grandchildren = expert.propose(ProposalRequest(task="", candidate=cutlass.content, n=6))
    moves = [ExpertProposer._parse_moves(c.content) for c in grandchildren]
    assert all(m["template"] == "matmul_cutlass" and matmul_variants.valid("matmul_cutlass", m) for m in moves)
    # one knob a step from 128x256x64 / 2x1 / cooperative; the schedule step (ping-pong) and the
    # tile step down (64x256, not cooperative) both become 64x256 ping-pong, a tile ping-pong holds
    neighbours = [("256x128x64", "2x1", "cooperative"), ("128x256x64", "1x1", "cooperative"),
                  ("128x256x64", "1x2", "cooperative"), ("64x256x64", "2x1", "pingpong")]
    assert sorted((m["tile"], m["cluster"], m["schedule"]) for m in moves[:4]) == sorted(neighbours)


def test_structural_moves_step_the_cutlass_knobs():
    """reduce_registers: a smaller tile (one CUTLASS builds with the schedule); reduce_shared_memory:
    fewer 3xTF32 stages, then a smaller tile. The WGMMA kernel sizes its own pipeline, so it has
    no shared-memory move."""
    regs = (FindingNote(text="[low] register_spills: ...", evidence={"moves": "reduce_registers"}),)
    smem = (FindingNote(text="[low] occupancy: ...", evidence={"moves": "reduce_shared_memory"}),)
    wgmma = {"template": "matmul_cutlass", **DEFAULT_MOVES["matmul_cutlass"]}
    assert suggested_moves(regs, "matmul_cutlass", wgmma) == [{"tile": "128x128x64"}]
    assert suggested_moves(regs, "matmul_cutlass", {**wgmma, "tile": "128x128x64"}) == []  # smallest cooperative
    assert suggested_moves(regs, "matmul_cutlass", {**wgmma, "tile": "64x256x64", "schedule": "pingpong"}) == \
        [{"tile": "64x128x64"}]
    assert suggested_moves(smem, "matmul_cutlass", wgmma) == []
    split = (FindingNote(text="[low] occupancy: ...", evidence={"moves": "split_k"}),)
    assert suggested_moves(split, "matmul_3xtf32", {"template": "matmul_3xtf32", **DEFAULT_MOVES["matmul_3xtf32"]}) == \
        [{"split": 2}]
    assert suggested_moves(split, "matmul_3xtf32", {"template": "matmul_3xtf32", "tile": "64x64x32", "stages": 3,
                                                    "split": 64}) == []  # the most it splits
    tf32 = {"template": "matmul_3xtf32", "tile": "64x256x32", "stages": 4, "split": 1}
    assert suggested_moves(regs, "matmul_3xtf32", tf32) == [{"tile": "128x64x32"}]  # 256x64, 128x128: as large
    assert suggested_moves(smem, "matmul_3xtf32", tf32) == [{"stages": 3}, {"tile": "128x64x32"}]
    one = {**tf32, "template": "matmul_1xtf32"}  # the same kernel with one TF32 product: the same steps
    assert suggested_moves(regs, "matmul_1xtf32", one) == [{"tile": "128x64x32"}]
    assert suggested_moves(smem, "matmul_1xtf32", one) == [{"stages": 3}, {"tile": "128x64x32"}]
    assert suggested_moves(split, "matmul_1xtf32", {**one, "tile": "128x128x32"}) == [{"split": 2}]

    expert = ExpertProposer(load_problem(str(HERE / "matmul_bf16.py")), seed=0)
    _, cutlass = expert.propose(ProposalRequest(task="", n=2))
    (child,) = expert.propose(ProposalRequest(task="", candidate=cutlass.content, findings=regs, n=1))
    assert child.content.startswith('"""matmul_cutlass: tile 128x128x64, cluster 2x1, schedule cooperative')
    assert child.note == "matmul_cutlass: tile 128x256x64->128x128x64"


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

    pattern = _pattern(name)
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
    path.write_text(render(_pattern(name)))
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
    from loopwise.kernels.evaluate.judge import static_policy

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
    sources = [render(_matmul(dtype, ta, tb, m, n, k), {"template": kind, **knobs})
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
