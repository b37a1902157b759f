"""The compiler seed's ``gemm`` move: Inductor's library GEMMs as the expert's Triton GEMM, the
pointwise kernel that alone reads a product fused as its epilogue. Judged by the real judge on
the CPU, in Triton's interpreter, from the GPU's record of linear + GELU + LayerNorm (sizes scaled
down) and from records written by hand in Inductor's format (linear + SiLU, once and with the
product also returned)."""

import re
import sys
from pathlib import Path

import pytest

from loopwise.core.propose import ProposalRequest
from loopwise.kernels.expert.elementwise import Unsupported
from loopwise.kernels.expert.inductor.extract import InductorRecord
from loopwise.kernels.expert.inductor.gemm import NotFusable, epilogue, find_sites
from loopwise.kernels.expert.inductor.standalone import parse_note, render_seed
from loopwise.kernels.expert.proposer import ExpertProposer, suggested_moves
from loopwise.kernels.problem import load_problem

sys.path.insert(0, str(Path(__file__).parents[1]))  # the expert tests' shared helpers
from expert_judging import judge_on_cpu  # noqa: E402

HERE = Path(__file__).parent
ROOT = Path(__file__).parents[4]
LAYERNORM = ROOT / "bench" / "uncovered" / "level2" / "1_linear_gelu_layernorm.py"
# Triton's interpreter has no libdevice: the two functions Inductor's LayerNorm kernel calls, in
# triton.language, for the CPU run only (the GPU runs the file as written)
INTERPRETER_LIBDEVICE = '''

@triton.jit
def _interpreted_tanh(x):
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def _interpreted_rsqrt(x):
    return tl.rsqrt(x)


class libdevice:
    tanh = _interpreted_tanh
    rsqrt = _interpreted_rsqrt
'''


def record(name: str) -> InductorRecord:
    return InductorRecord.from_json((HERE / "records" / f"{name}.json").read_text())


def scaled(rec: InductorRecord, sizes: dict[int, int]) -> InductorRecord:
    """``rec`` with every extent in ``sizes`` written as its smaller one (module and kernels)."""
    pattern = re.compile(r"\b(" + "|".join(map(str, sizes)) + r")\b")

    def small(text: str) -> str:
        return pattern.sub(lambda m: str(sizes[int(m.group(1))]), text)

    rec.module = small(rec.module)
    for kernel in rec.kernels:
        kernel.src = small(kernel.src)
    return rec


def variant(tmp_path: Path, path: Path, replacements: dict[str, str]):
    source = path.read_text()
    for old, new in replacements.items():
        assert old in source, old
        source = source.replace(old, new)
    out = tmp_path / path.name
    out.write_text(source)
    return load_problem(str(out))


def judged(problem, source, name, tmp_path, monkeypatch, precision="fp32"):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    judge_on_cpu(problem, source, name, tmp_path, precision=precision)


def test_the_pointwise_kernel_after_the_product_becomes_its_epilogue_and_is_judged_correct(tmp_path, monkeypatch):
    from loopwise.kernels.check import scan

    rec, problem = record("handwritten__linear_silu"), load_problem(str(HERE / "problems" / "linear_silu.py"))
    source = render_seed(rec, problem, {"gemm": 1})
    assert source.startswith('"""inductor: block 0, warps 0, cudagraph 0, gemm 1\n')
    assert parse_note(source)["gemm"] == 1 and parse_note(render_seed(rec, problem))["gemm"] == 0
    assert "extern_kernels.mm(" not in source and "triton_poi_fused_addmm_silu_0.run(" not in source
    assert "seed_gemm_0_launch(*_seed_gemm_0_operands, buf1, buf1, arg1_1, 5760)" in source
    assert 'input_precision="tf32x3"' in source and "tmp0 = acc.to(in_out_ptr0.dtype.element_ty)" in source
    assert "with triton_poi_fused_addmm_silu_0 as its epilogue" in source
    assert [r.code for r in scan(source) if r.severity != "info"] == []
    judged(problem, source, "seed-gemm-fused", tmp_path, monkeypatch)
    relaxed = render_seed(rec, problem, {"gemm": 1}, precision="relaxed")
    assert 'input_precision="tf32"' in relaxed and "tf32x3" not in relaxed


def test_addmm_adds_its_bias_in_the_tile_before_the_epilogue(tmp_path, monkeypatch):
    """``extern_kernels.addmm(bias, x, w.T)`` then a pointwise kernel that adds the bias again."""
    rec = record("handwritten__linear_silu")
    mm = "extern_kernels.mm(arg2_1, reinterpret_tensor(arg0_1, (40, 72), (1, 40), 0), out=buf0)"
    assert mm in rec.module
    rec.module = rec.module.replace(mm, "extern_kernels.addmm(arg1_1, arg2_1, reinterpret_tensor(arg0_1, (40, 72), "
                                        "(1, 40), 0), alpha=1, beta=1, out=buf0)")
    problem = variant(tmp_path, HERE / "problems" / "linear_silu.py",
                      {"silu(self.linear(x))": "silu(self.linear(x) + self.linear.bias)"})
    judged(problem, render_seed(rec, problem), "seed-addmm-library", tmp_path, monkeypatch)  # the record is right
    source = render_seed(rec, problem, {"gemm": 1})
    assert "extern_kernels.addmm(" not in source and "tl.load(d_ptr" in source
    assert "_seed_gemm_0_operands = (arg2_1, reinterpret_tensor(arg0_1, (40, 72), (1, 40), 0), arg1_1)" in source
    judged(problem, source, "seed-addmm-fused", tmp_path, monkeypatch)


def test_a_product_read_again_after_the_pointwise_kernel_is_not_fused(tmp_path, monkeypatch):
    """The product is also returned: the GEMM writes it, the pointwise kernel stays a launch."""
    rec, problem = record("handwritten__linear_silu_twice"), load_problem(str(HERE / "problems" / "linear_silu_twice.py"))
    (site,) = find_sites(rec)
    assert site.fused is None and site.reason == "the product is read again after the pointwise kernel"
    source = render_seed(rec, problem, {"gemm": 1})
    assert "extern_kernels.mm(" not in source and "seed_gemm_0_launch(arg2_1, " in source
    assert "triton_poi_fused_add_silu_0.run(buf0, arg1_1, buf1, 5760" in source
    assert "unfused: the product is read again after the pointwise kernel" in source
    judged(problem, source, "seed-gemm-twice", tmp_path, monkeypatch)


BMM_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(72))

    def forward(self, a, b):
        return torch.nn.functional.silu(torch.bmm(a, b) + self.bias)


def get_inputs():
    return [torch.randn(4, 20, 40), torch.randn(4, 40, 72)]


def get_init_inputs():
    return []
"""


def test_a_batch_of_products_fuses_its_epilogue_over_the_batch(tmp_path, monkeypatch):
    """``extern_kernels.bmm`` into a (4, 20, 72) buffer, then the same SiLU kernel over its 5760
    elements: the batch runs along the grid's second axis, the epilogue's index crosses it."""
    rec = record("handwritten__linear_silu")
    edits = {"assert_size_stride(arg0_1, (72, 40), (40, 1))": "assert_size_stride(arg0_1, (72, ), (1, ))",
             "assert_size_stride(arg1_1, (72, ), (1, ))": "assert_size_stride(arg1_1, (4, 20, 40), (800, 40, 1))",
             "assert_size_stride(arg2_1, (80, 40), (40, 1))": "assert_size_stride(arg2_1, (4, 40, 72), (2880, 72, 1))",
             "empty_strided_cuda((80, 72), (72, 1), torch.float32)": "empty_strided_cuda((4, 20, 72), (1440, 72, 1), torch.float32)",
             "extern_kernels.mm(arg2_1, reinterpret_tensor(arg0_1, (40, 72), (1, 40), 0), out=buf0)":
                 "extern_kernels.bmm(arg1_1, arg2_1, out=buf0)",
             ".run(buf1, arg1_1, 5760": ".run(buf1, arg0_1, 5760",
             "del arg1_1\n        return": "del arg0_1\n        return",
             "del arg0_1\n            del arg2_1": "del arg1_1\n            del arg2_1"}
    for old, new in edits.items():
        assert old in rec.module, old
        rec.module = rec.module.replace(old, new)
    rec.inputs = ["self.get_parameter('bias')", "arg:a", "arg:b"]
    path = tmp_path / "bmm_silu.py"
    path.write_text(BMM_PROBLEM)
    problem = load_problem(str(path))
    judged(problem, render_seed(rec, problem), "seed-bmm-library", tmp_path, monkeypatch)  # the record is right
    source = render_seed(rec, problem, {"gemm": 1})
    assert "extern_kernels.bmm(" not in source and "with triton_poi_fused_addmm_silu_0 as its epilogue" in source
    assert "seed_gemm_0_launch(*_seed_gemm_0_operands, buf1, buf1, arg0_1, 5760)" in source
    judged(problem, source, "seed-bmm-fused", tmp_path, monkeypatch)


@pytest.mark.slow  # about 100 s in Triton's interpreter on a CI core
def test_the_recorded_linear_gelu_layernorm_gets_the_gemm_and_is_judged_correct(tmp_path, monkeypatch):
    """Inductor's LayerNorm reduction reads the product: the GEMM is replaced, the reduction kept."""
    from loopwise.kernels.check import scan

    rec = scaled(record("h200__1_linear_gelu_layernorm"), {4096: 64, 2048: 48, 1024: 32})
    problem = variant(tmp_path, LAYERNORM, {"torch.randn(4096, 1024)": "torch.randn(64, 32)",
                                            "return [1024, 2048]": "return [32, 48]"})
    (site,) = find_sites(rec)
    assert site.fused is None and site.reason == "triton_red_fused_addmm_gelu_native_layer_norm_0 is not a pointwise kernel"
    source = render_seed(rec, problem, {"gemm": 1})
    assert "extern_kernels.mm(" not in source and "Library calls: none" in source
    assert [r.code for r in scan(source) if r.severity != "info"] == []
    assert "seed_gemm_0_launch(arg2_1, reinterpret_tensor(arg0_1, (32, 48), (1, 32), 0), None, buf0)" in source
    assert "triton_red_fused_addmm_gelu_native_layer_norm_0.run(buf4," in source
    marker = "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\n"
    judged(problem, source.replace(marker, marker + INTERPRETER_LIBDEVICE), "seed-gemm-layernorm", tmp_path, monkeypatch)


def test_the_rendered_gemm_compiles_for_hopper_on_the_tensor_cores(tmp_path):
    """The full-size recorded problem's GEMM (tf32x3) and the fused linear + SiLU kernel compile for
    sm_90 to warp-group MMAs within a block's shared memory."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert.aot import compile_for_hopper
    from loopwise.kernels.expert.generate import HOPPER_SHARED_BYTES

    problem = load_problem(str(LAYERNORM))
    got = compile_for_hopper(render_seed(record("h200__1_linear_gelu_layernorm"), problem, {"gemm": 1}), problem,
                             kernel="seed_gemm_0")
    assert got["wgmma"] and 0 < got["shared_bytes"] <= HOPPER_SHARED_BYTES and got["spill_bytes"] == 0, got
    problem = load_problem(str(HERE / "problems" / "linear_silu.py"))
    got = compile_for_hopper(render_seed(record("handwritten__linear_silu"), problem, {"gemm": 1}), problem)
    assert got["wgmma"] and 0 < got["shared_bytes"] <= HOPPER_SHARED_BYTES, got


@pytest.mark.parametrize("variant", [1, 2])
def test_each_other_gemm_tile_compiles_for_hopper_without_spilling(variant):
    """The ``gemm_tile`` variants of the recorded linear + GELU + LayerNorm's GEMM (tf32x3, the
    pointwise kernel as its epilogue): warp-group MMAs inside a block's shared memory, no register
    spilled."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert.aot import compile_for_hopper
    from loopwise.kernels.expert.generate import HOPPER_SHARED_BYTES

    problem = load_problem(str(LAYERNORM))
    source = render_seed(record("h200__1_linear_gelu_layernorm"), problem, {"gemm": 1, "gemm_tile": variant})
    got = compile_for_hopper(source, problem, kernel="seed_gemm_0")
    assert got["wgmma"] and 0 < got["shared_bytes"] <= HOPPER_SHARED_BYTES and got["spill_bytes"] == 0, got


def test_the_gemm_tile_move_picks_the_tile_and_stages_and_needs_the_gemm_move(tmp_path, monkeypatch):
    from loopwise.kernels.expert.inductor.gemm import tiles

    rec, problem = record("handwritten__linear_silu"), load_problem(str(HERE / "problems" / "linear_silu.py"))
    (site,) = find_sites(big(record("handwritten__linear_silu")))  # 4096 x 2048
    assert [(t["BM"], t["BN"], t["warps"], t["stages"]) for t in (tiles(site, v) for v in (0, 1, 2))] == \
        [(128, 128, 8, 3), (128, 128, 8, 4), (64, 128, 8, 4)]
    site.shape = (100, 60)  # N of at most 64: the tile's longer side is M's
    assert (tiles(site, 2)["BM"], tiles(site, 2)["BN"], tiles(site, 2)["warps"]) == (64, 64, 4)
    with pytest.raises(ValueError, match="not one of"):
        tiles(site, 7)
    source = render_seed(rec, problem, {"gemm": 1, "gemm_tile": 2})
    assert source.startswith('"""inductor: block 0, warps 0, cudagraph 0, gemm 1, gemm tile 2\n')
    assert parse_note(source)["gemm_tile"] == 2 and parse_note(render_seed(rec, problem, {"gemm": 1}))["gemm_tile"] == 0
    assert '{"BM": 64, "BN": 128, "BK": 32, "GROUP_M": 8}' in source  # 80 x 72: a 128 x 128 tile, M halved
    assert "Triton GEMM (tf32x3, 64x128x32 tiles, 4 stages)" in source
    judged(problem, source, "seed-gemm-tile-2", tmp_path, monkeypatch)
    with pytest.raises(Unsupported, match="needs the gemm or conv move"):
        render_seed(rec, problem, {"gemm_tile": 1})
    proposer = ExpertProposer(problem, seed=3, device="cuda", record_source=lambda p, d: rec,
                              bandwidth_source=lambda device: 4247.0)
    root = proposer.propose(ProposalRequest(task="", candidate="", n=1))[0]
    seen = []
    for _ in range(6):
        seen += [parse_note(c.content) for c in proposer.propose(ProposalRequest(task="", candidate=root.content, n=6))]
    seeds = [m for m in seen if m]
    assert all(m["gemm"] for m in seeds if m["gemm_tile"])  # never a tile without the move
    moved = next(m for m in seeds if m["gemm"])
    children = proposer.propose(ProposalRequest(task="", candidate=render_seed(rec, problem, moved), n=8))
    tiled = [c for c in children if (parse_note(c.content) or {}).get("gemm_tile")]
    assert tiled and "tiles, 4 stages)" in tiled[0].note, [c.note for c in children]


def test_a_kernel_that_is_no_epilogue_of_the_product_is_not_fused():
    (kernel,) = record("handwritten__linear_silu").kernels
    assert epilogue(kernel, "in_out_ptr0")[-1] == "tl.store(in_out_ptr0 + x2, tmp4, xmask)"
    cases = {"tl.load(in_out_ptr0 + (x2), xmask)": ("tl.load(in_out_ptr0 + (x0), xmask)", "elsewhere than at its own index"),
             "tmp2 = tmp0 + tmp1": ("tmp2 = tmp0 + tmp1 + tl.program_id(0)", "calls tl.program_id"),
             "x0 = (xindex % 72)": ("x0 = (xindex % 72) + xoffset", "uses xoffset"),
             "tmp4 = tmp2 * tmp3": ("tmp4 = tmp2 * tmp3\n    acc = tmp4", "a name the GEMM defines (acc)")}
    for old, (new, reason) in cases.items():
        changed = InductorRecord.from_json(record("handwritten__linear_silu").to_json()).kernels[0]
        assert old in changed.src
        changed.src = changed.src.replace(old, new)
        with pytest.raises(NotFusable, match=re.escape(reason)):
            epilogue(changed, "in_out_ptr0")


def test_a_kernel_using_a_name_any_of_the_moves_kernels_defines_is_not_fused():
    """The names come from the rendered GEMM, convolution and CUTLASS read-back kernels, so a name a
    template adds is refused without a list to keep; the flat index and mask the epilogue drops are
    not among them."""
    from loopwise.kernels.expert.inductor.gemm import kernel_names

    assert {"xindex", "xmask", "xoffset"}.isdisjoint(kernel_names())
    for name in ("g_a_ptrs", "g_xbase", "KP", "s_cw"):  # the GEMM's, the convolution's, the read-back's, a stride
        assert name in kernel_names()
        changed = InductorRecord.from_json(record("handwritten__linear_silu").to_json()).kernels[0]
        changed.src = changed.src.replace("tmp4 = tmp2 * tmp3", f"tmp4 = tmp2 * tmp3\n    {name} = tmp4")
        with pytest.raises(NotFusable, match=re.escape(f"a name the GEMM defines ({name})")):
            epilogue(changed, "in_out_ptr0")


def test_the_move_is_offered_where_a_library_gemm_is_and_its_note_says_what_it_did():
    seeded = ExpertProposer(load_problem(str(HERE / "problems" / "linear_silu.py")), seed=1, device="cuda",
                            record_source=lambda p, d: record("handwritten__linear_silu"))
    root = seeded.propose(ProposalRequest(task="", candidate="", n=1))[0]
    children = seeded.propose(ProposalRequest(task="", candidate=root.content, n=8))
    moved = [c for c in children if (parse_note(c.content) or {}).get("gemm") == 1]  # beside the linear template
    assert moved and moved[0].note.startswith("inductor: gemm 0->1 (extern_kernels.mm into buf0 -> Triton GEMM "
                                              "(tf32x3) with triton_poi_fused_addmm_silu_0 as its epilogue)")

    class Finding:  # a profiling tool's suggestion for the seed: fuse its kernels
        evidence = {"moves": "fuse_kernels"}
    at_root = {"template": "inductor", **parse_note(root.content)}
    assert suggested_moves([Finding()], "inductor", at_root) == [{"gemm": 1}]

    softmax = load_problem(str(ROOT / "loopwise" / "kernels" / "examples" / "softmax_problem.py"))
    plain = ExpertProposer(softmax, seed=1, device="cuda", record_source=lambda p, d: record("handwritten__softmax_problem"))
    root = plain.propose(ProposalRequest(task="", candidate="", n=1))[0]
    for _ in range(3):
        children = plain.propose(ProposalRequest(task="", candidate=root.content, n=6))
        assert all(parse_note(c.content)["gemm"] == 0 for c in children if parse_note(c.content))
    with pytest.raises(Unsupported, match="no library GEMM to replace"):
        render_seed(record("handwritten__softmax_problem"), softmax, {"gemm": 1})


def test_the_products_follow_the_policy_and_the_buffers_type():
    """fp32: tf32x3 under the fp32 policy, TF32 under relaxed; a half buffer: its own products (no
    input_precision), the epilogue reading the accumulator rounded to the buffer's type."""
    problem = load_problem(str(HERE / "problems" / "linear_silu.py"))
    rec = record("handwritten__linear_silu")
    for precision, dot in (("fp32", 'input_precision="tf32x3"'), ("relaxed", 'input_precision="tf32"')):
        source = render_seed(rec, problem, {"gemm": 1}, precision=precision)
        assert f"acc = tl.dot(g_a, g_b, acc, {dot})" in source, precision
    rec.module = rec.module.replace("empty_strided_cuda((80, 72), (72, 1), torch.float32)",
                                    "empty_strided_cuda((80, 72), (72, 1), torch.float16)")
    source = render_seed(rec, problem, {"gemm": 1})
    assert "acc = tl.dot(g_a, g_b, acc)\n" in source and "input_precision" not in source
    assert '"BK": 64' in source and "(float16 products, fp32 sums)" in source
    rec.module = rec.module.replace("torch.float16)", "torch.int32)")  # no GEMM of ours: the library's call stays
    with pytest.raises(Unsupported, match="no library GEMM to replace"):
        render_seed(rec, problem, {"gemm": 1})


def test_loads_and_stores_inductor_left_unmasked_are_masked_to_the_tile():
    """Where its block divides the range Inductor masks nothing (``None``); on a GEMM tile past the
    product's edge every access is masked, and a kernel's own mask is kept beside the tile's."""
    (kernel,) = record("handwritten__linear_silu").kernels
    kernel.src = (kernel.src.replace("tl.load(in_ptr0 + (x0), xmask,", "tl.load(in_ptr0 + (x0), None,")
                  .replace("tl.store(in_out_ptr0 + (x2), tmp4, xmask)", "tl.store(in_out_ptr0 + (x2), tmp4, tmp4 > 0)"))
    lines = epilogue(kernel, "in_out_ptr0")
    assert "tmp1 = tl.load(in_ptr0 + x0, xmask, eviction_policy='evict_last')" in lines
    assert lines[-1] == "tl.store(in_out_ptr0 + x2, tmp4, xmask & (tmp4 > 0))"
    assert not any(line.startswith(("xoffset", "xindex =", "xmask =")) for line in lines)


BMM_ONLY_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(4, 20, 40), torch.randn(4, 40, 72)]


def get_init_inputs():
    return []
"""


def library_only_record() -> InductorRecord:
    """Inductor's code for a lone bmm (written by hand in its format): one cuBLAS call, no Triton kernel."""
    rec = record("handwritten__linear_silu")
    header = rec.module[:rec.module.index("# kernel path")]
    rec.module = header + '''
async_compile.wait(globals())
del async_compile

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        arg0_1, arg1_1 = args
        args.clear()
        assert_size_stride(arg0_1, (4, 20, 40), (800, 40, 1))
        assert_size_stride(arg1_1, (4, 40, 72), (2880, 72, 1))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((4, 20, 72), (1440, 72, 1), torch.float32)
            # Topologically Sorted Source Nodes: [bmm], Original ATen: [aten.bmm]
            extern_kernels.bmm(arg0_1, arg1_1, out=buf0)
            del arg0_1
            del arg1_1
        return (buf0, )

runner = Runner(partitions=[])
call = runner.call
'''
    rec.kernels, rec.inputs, rec.extern = [], ["arg:a", "arg:b"], ["extern_kernels.bmm"]
    return rec


def test_a_problem_inductor_leaves_to_cublas_alone_is_seeded_through_the_gemm_move(tmp_path, monkeypatch):
    """Inductor's code for a lone product launches no kernel of its own (a candidate of it would only
    re-call PyTorch), but the gemm move writes that call as a Triton GEMM: the seed is the problem's
    candidate, always with the move."""
    path = tmp_path / "bmm_only.py"
    path.write_text(BMM_ONLY_PROBLEM)
    problem, rec = load_problem(str(path)), library_only_record()
    with pytest.raises(Unsupported, match="library calls only: extern_kernels.bmm"):
        render_seed(rec, problem)
    source = render_seed(rec, problem, {"gemm": 1})
    assert "extern_kernels.bmm(" not in source and "Library calls: none" in source
    assert "no Triton kernel of its own (library calls only)" in source
    judged(problem, source, "seed-bmm-only", tmp_path, monkeypatch)
    proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: library_only_record(),
                              bandwidth_source=lambda device: 4247.0)
    first = proposer.propose(ProposalRequest(task="", candidate="", n=3))
    seeds = [parse_note(p.content) for p in first if p.content.startswith('"""inductor:')]
    assert seeds and seeds[0] == {"template": "inductor", "block": 0, "warps": 0, "cudagraph": 0, "gemm": 1, "gemm_tile": 0, "conv": 0}
    assert all(s["gemm"] == 1 for s in seeds)
    children = proposer.propose(ProposalRequest(task="", candidate=first[0].content, n=4))
    assert all(parse_note(c.content)["gemm"] == 1 for c in children if c.content.startswith('"""inductor:'))


def big(rec: InductorRecord) -> InductorRecord:
    """The linear + SiLU record at (4096 x 1024) @ (1024 x 2048): 512 output tiles, K 1024."""
    return scaled(rec, {80: 4096, 40: 1024, 72: 2048, 5760: 4096 * 2048})


def test_a_site_knows_its_inner_extent_from_the_operands_sizes():
    (site,) = find_sites(record("handwritten__linear_silu"))  # mm(arg2_1 (80, 40), reinterpret_tensor(arg0_1, (40, 72)))
    assert (site.shape, site.k) == ((80, 72), 40)
    (site,) = find_sites(library_only_record())  # bmm(arg0_1 (4, 20, 40), arg1_1)
    assert (site.shape, site.k) == ((4, 20, 72), 40)
    (site,) = find_sites(big(record("handwritten__linear_silu")))
    assert (site.shape, site.k) == ((4096, 2048), 1024)


def test_the_gemm_move_pays_first_for_a_large_fp32_product_under_the_fp32_policy_only():
    from loopwise.kernels.expert.inductor.gemm import PAYING_K, pays

    large = find_sites(big(record("handwritten__linear_silu")))
    assert pays(large, "fp32")
    assert not pays(large, "relaxed")  # cuBLAS uses TF32 there as the move does
    assert not pays(find_sites(record("handwritten__linear_silu")), "fp32")  # 80 x 72: one tile
    half = find_sites(big(record("handwritten__linear_silu")))
    half[0].dtype = "bfloat16"  # cuBLAS runs a half product on the tensor cores too
    assert not pays(half, "fp32")
    short = find_sites(big(record("handwritten__linear_silu")))
    short[0].k = PAYING_K // 2
    assert not pays(short, "fp32")


def test_the_expert_proposes_the_seed_with_the_gemm_move_second_where_it_pays():
    problem = load_problem(str(HERE / "problems" / "linear_silu.py"))

    def first(rec, precision="fp32"):
        proposer = ExpertProposer(problem, device="cuda", precision=precision, record_source=lambda p, d: rec,
                                  bandwidth_source=lambda device: 4247.0)
        return [parse_note(p.content) for p in proposer.propose(ProposalRequest(task="", candidate="", n=3))]

    seed = {"template": "inductor", "block": 0, "warps": 0, "cudagraph": 0, "gemm": 0, "gemm_tile": 0, "conv": 0}
    got = first(big(record("handwritten__linear_silu")))
    assert got[:2] == [seed, {**seed, "gemm": 1}] and got[2] is None  # the first template third (no seed note)
    assert {**seed, "gemm": 1} not in first(big(record("handwritten__linear_silu")), "relaxed")[:2]
    assert {**seed, "gemm": 1} not in first(record("handwritten__linear_silu"))[:2]


def test_an_operand_that_is_not_k_major_or_not_aligned_is_copied_so_for_the_tf32_products_only():
    """tf32 products read both operands K-major with rows 16 elements apart (Triton's 16-byte copies
    into shared memory): a transposed or odd-K operand is copied into padded rows, one already so is
    read in place; the values are the operand's."""
    import ast

    import torch

    rec = record("handwritten__linear_silu")
    problem = load_problem(str(HERE / "problems" / "linear_silu.py"))
    source = render_seed(rec, problem, {"gemm": 1})
    assert "b = _aligned_k_major(b.transpose(-1, -2)).transpose(-1, -2)" in source
    helper = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_aligned_k_major")
    scope = {"torch": torch}
    exec(ast.unparse(helper), scope)
    aligned = scope["_aligned_k_major"]
    x = torch.randn(96, 64)
    assert aligned(x) is x  # K-major, rows 64 apart: read in place
    for t in (torch.randn(96, 2949), torch.randn(2949, 96).T, torch.randn(3, 50, 40)[:, :, :33], torch.randn(40, 96)[:, :72].T):
        got = aligned(t)
        assert got.stride(-1) == 1 and all(s % 16 == 0 for s in got.stride()[:-1]) and torch.equal(got, t), t.stride()
    half = record("handwritten__linear_silu")
    half.module = half.module.replace("torch.float32)", "torch.bfloat16)")
    assert "_aligned_k_major" not in render_seed(half, problem, {"gemm": 1})


def test_a_half_product_before_an_argmin_stays_cublas(tmp_path):
    """Inductor's code picks an index among half products (an argmin kernel, named in its source
    comments): a Triton GEMM would round some sums to a neighbouring value and flip near-ties, so
    the move leaves the product to cuBLAS; an fp32 product is still replaced."""
    problem = load_problem(str(HERE / "problems" / "linear_silu.py"))
    rec = record("handwritten__linear_silu")
    rec.module = rec.module.replace("Original ATen: [aten.addmm, aten.silu]", "Original ATen: [aten.addmm, aten.argmin]")
    assert len(find_sites(rec)) == 1  # fp32: replaced all the same
    half = InductorRecord.from_json(rec.to_json())
    half.module = half.module.replace("torch.float32)", "torch.bfloat16)")
    assert find_sites(half) == []
    with pytest.raises(Unsupported, match="feed an argmin, a top-k or a sort"):
        render_seed(half, problem, {"gemm": 1})
    proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: half, bandwidth_source=lambda d: 4247.0)
    for p in proposer.propose(ProposalRequest(task="", candidate="", n=4)):
        assert not p.content.startswith('"""inductor') or parse_note(p.content)["gemm"] == 0
