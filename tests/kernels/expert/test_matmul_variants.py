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
import itertools

import pytest

from loopwise.core.propose import FindingNote, ProposalRequest
from loopwise.kernels.expert import matmul_variants
from loopwise.kernels.expert.generate import DEFAULT_MOVES, default_moves, fits, render, variants
from loopwise.kernels.expert.proposer import SPACE, ExpertProposer, suggested_moves
from loopwise.kernels.problem import load_problem

from expert_judging import HERE, captured, matmul_pattern  # noqa: E402 - tests/kernels/expert on sys.path


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
    of K = 524288: far below the split Triton template on the H200, docs/log/2026-12-01.md, 14:11
    section), and each costs a minute of nvcc. The mma.sync kernels
    (3xTF32 under fp32, one TF32 product under relaxed) split K by the same rule as the Triton
    template; where K is not split, relaxed keeps WGMMA's TF32 alone."""
    skinny = matmul_pattern("float32", m=256, n=256, k=524288)
    assert variants(skinny, "relaxed") == ["matmul", "matmul_1xtf32"]
    assert default_moves(skinny, "matmul_1xtf32", "relaxed") == {"tile": "128x128x32", "stages": 3, "split": 64}
    assert render(skinny, {"template": "matmul_1xtf32"}, precision="relaxed").startswith(
        '"""matmul_1xtf32: tile 128x128x32, stages 3, split 64\n')
    assert variants(matmul_pattern("bfloat16", m=256, n=256, k=524288), "relaxed") == ["matmul"]
    # 3xTF32 splits K too: 4 tiles of 128 x 128, K split 64 ways (256 programs, 8192 of K each)
    assert variants(skinny, "fp32") == ["matmul", "matmul_3xtf32"]
    assert default_moves(skinny, "matmul_3xtf32") == {"tile": "128x128x32", "stages": 3, "split": 64}
    assert render(skinny, {"template": "matmul_3xtf32"}).startswith(
        '"""matmul_3xtf32: tile 128x128x32, stages 3, split 64\n')
    # a split only where the tiles leave SMs idle: not for L1/16's 512 tiles, and not past two waves
    assert not fits(matmul_pattern("float32", m=2048, n=4096, k=8192), {"template": "matmul_3xtf32", **DEFAULT_MOVES["matmul_3xtf32"], "split": 2})
    assert not fits(skinny, {"template": "matmul_3xtf32", "tile": "64x64x32", "stages": 3, "split": 64})  # 1024 programs
    assert fits(skinny, {"template": "matmul_3xtf32", "tile": "64x64x32", "stages": 3, "split": 32})
    square = matmul_pattern("float32", m=2048, n=4096, k=8192)  # L1/16: 512 tiles, no split
    assert variants(square, "fp32") == ["matmul", "matmul_3xtf32"]
    assert variants(square, "relaxed") == ["matmul", "matmul_cutlass_tf32"]
    assert fits(skinny, {"template": "matmul_1xtf32", "tile": "64x64x32", "stages": 3, "split": 32})
    assert not fits(skinny, {"template": "matmul_1xtf32", "tile": "64x64x32", "stages": 3, "split": 64})


def test_capture_records_the_operand_dtype_of_matrix_products(tmp_path):
    bf16 = dict(captured("matmul_bf16.py").params)
    assert bf16 == {"trans_a": False, "trans_b": False, "m": 72, "n": 40, "k": 96, "dtype": "bfloat16"}
    fp16 = captured("matmul_fp16_at_bt.py")
    assert dict(fp16.params) == {"trans_a": True, "trans_b": True, "m": 60, "n": 56, "k": 48, "dtype": "float16"}
    assert dict(captured("matmul_plain.py").params)["dtype"] == "float32"
    mixed = captured("matmul_bf16.py", {"torch.randn(K, N, dtype=torch.bfloat16)": "torch.randn(K, N)"}, tmp_path)
    assert mixed.kind == "unsupported"  # one bf16 and one fp32 operand: no template


def test_variants_follow_dtype_precision_and_alignment(tmp_path):
    """CUTLASS reads 16-byte vectors: a variant is offered only where each operand's contiguous
    extent (K of A, N of B and C; M of A and K of B when they are transposed) is a multiple of 8
    16-bit or 4 fp32 elements. 3xTF32 only under the fp32 policy, where Triton's TF32 is not allowed."""
    bf16 = captured("matmul_bf16.py")
    assert variants(bf16, "fp32") == variants(bf16, "relaxed") == ["matmul", "matmul_cutlass"]
    assert variants(captured("matmul_bf16_odd.py"), "fp32") == ["matmul"]  # K = 100
    assert variants(captured("matmul_fp16_at_bt.py"), "fp32") == ["matmul"]  # M = 60 is A's contiguous extent
    aligned = captured("matmul_fp16_at_bt.py", {"M = 60": "M = 64"}, tmp_path)
    assert variants(aligned, "fp32") == ["matmul", "matmul_cutlass"]
    fp32 = captured("matmul_fp32_aligned.py")
    assert variants(fp32, "fp32") == ["matmul", "matmul_3xtf32"]
    assert variants(fp32, "relaxed") == ["matmul", "matmul_cutlass_tf32"]
    assert variants(captured("matmul_plain.py"), "fp32") == ["matmul"]  # N = 33
    assert variants(captured("matmul_plain.py"), "relaxed") == ["matmul"]
    # TF32 WGMMA reads both operands K-major after the copies: K and N must be whole 16-byte rows,
    # whatever the transposes (M of a transposed A does not matter, unlike the in-place variants)
    assert matmul_variants.accepts("matmul_cutlass_tf32", matmul_pattern("float32", trans_a=True, m=1001, n=776, k=520))
    assert not matmul_variants.accepts("matmul_cutlass_tf32", matmul_pattern("float32", m=1000, n=776, k=522))
    assert not matmul_variants.accepts("matmul_cutlass_tf32", matmul_pattern("bfloat16"))
    assert variants(captured("chain.py"), "fp32") == ["elementwise"]
    assert variants(captured("unsupported_conv.py"), "fp32") == []
    # M needs no alignment where A is not transposed (TMA and the predicated loads cover the rows)
    assert matmul_variants.accepts("matmul_cutlass", matmul_pattern("bfloat16", m=1001, n=776, k=520))
    assert not matmul_variants.accepts("matmul_cutlass", matmul_pattern("bfloat16", trans_a=True, m=1001, n=776, k=520))
    assert not matmul_variants.accepts("matmul_3xtf32", matmul_pattern("bfloat16"))
    assert not matmul_variants.accepts("matmul_1xtf32", matmul_pattern("bfloat16"))
    assert variants(captured("matmul_bf16.py"), "relaxed") == ["matmul", "matmul_cutlass"]


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
        render(matmul_pattern("bfloat16"), {"template": "matmul_cutlass", "tile": "64x128x64", "schedule": "cooperative"})
    with pytest.raises(ValueError, match="does not apply"):
        render(matmul_pattern("float32"), {"template": "matmul_cutlass"})  # fp32 has no WGMMA variant here


def test_rendered_sources_are_python_whose_kernel_names_the_knobs_cutlass_types():
    names = set()
    for (trans_a, trans_b), dtype in itertools.product(itertools.product((False, True), repeat=2),
                                                       ("bfloat16", "float16")):
        for moves in _all_moves("matmul_cutlass"):
            source = render(matmul_pattern(dtype, trans_a, trans_b), moves)
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
            source = render(matmul_pattern("float32", trans_a, trans_b), moves)
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
            source = render(matmul_pattern("float32", trans_a, trans_b), moves)
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
    for kind in matmul_variants.MATMUL_KINDS:  # a batch's: test_bmm_cutlass.py
        pattern = matmul_pattern("bfloat16" if kind == "matmul_cutlass" else "float32", trans_b=True)
        for moves in _all_moves(kind):
            assert ExpertProposer._parse_moves(render(pattern, moves)) == moves
    triton = render(matmul_pattern("bfloat16"), {"block": 64, "warps": 4, "chunk": 16})
    assert ExpertProposer._parse_moves(triton) == {"template": "matmul", "block": 64, "warps": 4, "chunk": 16,
                                                   "split": 1, "kmajor": 0}
    assert render(matmul_pattern("bfloat16")).startswith('"""matmul: block 128, 8 warps, chunk 32\n')


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

