"""The convolution templates (implicit GEMMs: 2-D, 3-D, transposed, separable; NCHW and NHWC; channels-last epilogues)."""

import pytest

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.judge import LocalJudge
from loopwise.kernels.evaluate.result import Status
from loopwise.kernels.expert import capture, generate
from loopwise.kernels.expert.generate import render
from loopwise.kernels.expert.proposer import ExpertProposer
from loopwise.kernels.problem import load_problem

from expert_judging import HERE, judged_correct, judged_variant, load_candidate, problem_variant, tiered  # noqa: E402 - tests/kernels/expert on sys.path


@pytest.mark.parametrize("init,channels,moves", tiered([
    (None, 3, {"block": 32, "chunk": 16}),  # 3x2 kernel, stride (2, 1), padding (1, 2), dilation (2, 1), bias
    ("[3, 40, (3, 3), (1, 1), (1, 1), (1, 1), False]", 3, {"block": 64, "chunk": 32}),  # 3x3 same-size, no bias
    # the nhwc move, channels innermost: 20 channels, two chunks of 16 a window position, the second mostly empty
    ("[20, 24, (3, 2), (2, 1), (1, 2), (2, 1), True]", 20, {"block": 32, "chunk": 16, "nhwc": 1}),
    ("[16, 8, (1, 1), (1, 1), (0, 0), (1, 1), False]", 16, {"block": 16, "chunk": 32, "nhwc": 1}),  # 1x1, a chunk beyond C
    ("[16, 8, (1, 1), (1, 1), (0, 0), (1, 1), False]", 16, {"block": 16, "chunk": 32}),  # 16 channels gathered NCHW
], fast={0, 1}))
def test_conv2d_as_implicit_gemm_is_judged_correct(tmp_path, monkeypatch, init, channels, moves):
    """By default K is (channel, kh, kw) over the NCHW input; with the nhwc move (16 input channels
    or more) the input goes NHWC and each window position's channels are a run of contiguous K."""
    replacements = {"[3, 20, (3, 2), (2, 1), (1, 2), (2, 1), True]": init} if init else {}
    replacements |= {"torch.randn(2, 3, 13, 17)": f"torch.randn(2, {channels}, 13, 17)"}
    judged_variant(tmp_path, monkeypatch, "conv2d.py", "conv2d", moves, replacements)
    source, _ = generate(load_problem(str(tmp_path / "variant_conv2d.py")), moves)
    nhwc = bool(moves.get("nhwc"))
    assert ("NHWC" in source) == nhwc and ("permute(0, 2, 3, 1)" in source) == nhwc
    assert ExpertProposer._parse_moves(source)["nhwc"] == int(nhwc)  # the first line names the move


def _conv1d(tmp_path, init: str, shape: str):
    return problem_variant(tmp_path, "conv2d.py", {"nn.Conv2d(": "nn.Conv1d(", "[3, 20, (3, 2), (2, 1), (1, 2), (2, 1), True]": init,
                                                   "torch.randn(2, 3, 13, 17)": f"torch.randn{shape}"})


def test_a_lone_conv1d_is_the_2d_implicit_gemm_with_height_one(tmp_path):
    """A Conv1d's window, stride, padding and dilation are the 2-D template's along the width, one
    along the height; the generated forward views the input and weights with that height."""
    pattern = capture(load_problem(str(_conv1d(tmp_path, "[5, 11, 3, 2, 2, 3, True]", "(2, 5, 37)"))))
    assert pattern.kind == "conv2d" and pattern.ops == ("conv1d",), pattern.reason
    p = dict(pattern.params)
    assert (p["kh"], p["kw"], p["stride"], p["padding"], p["dilation"]) == (1, 3, (1, 2), (0, 2), (1, 3))
    source = render(pattern, {"block": 32})
    assert "x0.unsqueeze(2)" in source and "conv.weight.unsqueeze(2)" in source and "out.squeeze(2)" in source


@pytest.mark.slow
@pytest.mark.parametrize("init,shape,moves", [
    ("[5, 11, 3, 2, 2, 3, True]", "(2, 5, 37)", {"block": 32, "chunk": 16}),  # stride, padding, dilation, bias
    ("[20, 7, 4, 1, 0, 1, False]", "(3, 20, 9)", {"block": 16, "chunk": 16, "nhwc": 1}),  # channels innermost
])
def test_conv1d_as_implicit_gemm_is_judged_correct(tmp_path, monkeypatch, init, shape, moves):
    judged_correct(_conv1d(tmp_path, init, shape), moves, tmp_path, monkeypatch)


def test_convolutions_gather_nchw_from_a_128_tile_and_read_nhwc_only_as_a_move(tmp_path):
    """The implicit GEMM starts from 128 x 128 tiles with 8 warps, gathering the NCHW input (the
    fastest of the tiles and layouts measured; see docs/log/expert-notes.md);
    reading NHWC is a move, and fits only where a convolution has 16 input channels or more."""
    from loopwise.kernels.expert.generate import default_moves, fits

    def conv(channels):
        return capture(load_problem(str(problem_variant(tmp_path, "conv2d.py", {
            "[3, 20, (3, 2), (2, 1), (1, 2), (2, 1), True]": f"[{channels}, 8, (3, 3), (1, 1), (1, 1), (1, 1), True]",
            "torch.randn(2, 3, 13, 17)": f"torch.randn(2, {channels}, 13, 17)"}))))

    def graph(channels):
        return capture(load_problem(str(problem_variant(tmp_path, "partial_groupnorm.py", {
            "in_channels=3": f"in_channels={channels}", "torch.randn(2, 3, 13, 11)": f"torch.randn(2, {channels}, 13, 11)"}))))

    for channels in (3, 64):
        assert {k: default_moves(conv(channels))[k] for k in ("block", "warps", "nhwc")} == {
            "block": 128, "warps": 8, "nhwc": 0}
    for channels in (3, 16):
        assert {k: default_moves(graph(channels), "graph_conv")[k] for k in ("tile", "gemm_warps", "nhwc")} == {
            "tile": 128, "gemm_warps": 8, "nhwc": 0}
    assert fits(conv(64), {"template": "conv2d", "nhwc": 1}) and not fits(conv(3), {"template": "conv2d", "nhwc": 1})
    assert fits(graph(16), {"template": "graph_conv", "nhwc": 1})
    assert not fits(graph(3), {"template": "graph_conv", "nhwc": 1})
    assert "permute(0, 2, 3, 1)" not in render(conv(3), {"nhwc": 1})  # too few channels: NCHW whatever the move


@pytest.fixture(scope="module")
def conv2d_ptx(tmp_path_factory):
    """:func:`_conv2d_ptx` by (channels, nhwc, wide), each compiled once for the module: the NHWC
    copies test and the 32-bit offsets test read the same 64-channel NHWC kernel."""
    compiled: dict[tuple[int, int, bool], str] = {}

    def ptx(channels: int, nhwc: int, wide: bool = False) -> str:
        key = (channels, nhwc, wide)
        if key not in compiled:
            compiled[key] = _conv2d_ptx(tmp_path_factory.mktemp("conv_ptx"), channels, nhwc, wide)
        return compiled[key]

    return ptx


def _conv2d_ptx(tmp_path, channels: int, nhwc: int, wide: bool = False) -> str:
    """The PTX of the conv2d template's kernel compiled ahead of time for sm_90: a 3x3 convolution of
    ``channels`` -> 128 channels, stride 1, padding 1; 128 x 128 tiles, 32 along K, 8 warps, 3
    stages; with the ``nhwc`` move, 64-bit offsets if ``wide``; integers divisible by 16 specialised
    as the launch specialises them."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path = problem_variant(tmp_path, "conv2d.py", {
        "[3, 20, (3, 2), (2, 1), (1, 2), (2, 1), True]": f"[{channels}, 128, (3, 3), (1, 1), (1, 1), (1, 1), True]",
        "torch.randn(2, 3, 13, 17)": f"torch.randn(2, {channels}, 13, 17)"})
    source, _ = generate(load_problem(str(path)), {"block": 128, "chunk": 32, "warps": 8, "nhwc": nhwc})
    module = load_candidate(source, tmp_path, f"conv_ptx_{channels}_{nhwc}_{int(wide)}")
    names = ["x_ptr", "w_ptr", "b_ptr", "out_ptr", "C", "H", "W", "CO", "OH", "OW", "M"]
    constants = {"KH": 3, "KW": 3, "SH": 1, "SW": 1, "PH": 1, "PW": 1, "DH": 1, "DW": 1, "HAS_BIAS": True,
                 "I64": wide, "BM": 128, "BN": 128, "BK": 32} | (
                     {"CP": -(-channels // 32) * 32} if nhwc and channels >= 16 else {})
    signature = {n: "*fp32" if n.endswith("ptr") else "i32" for n in names} | {n: "constexpr" for n in constants}
    aligned = ["x_ptr", "w_ptr", "b_ptr", "out_ptr", "CO"] + (["C"] if channels % 16 == 0 else [])
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    compiled = triton.compile(ASTSource(module.conv2d_kernel, signature, constants, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
    return compiled.asm["ptx"]


def test_nhwc_convolution_tiles_are_staged_in_16_byte_copies_on_hopper(conv2d_ptx):
    """What the nhwc move changes: compiled for sm_90 (a 3x3
    convolution of 3 channels, 128x128 tiles, 32 along K), the NCHW gather stages both tiles with
    4-byte cp.async copies (K = (channel, kh, kw) runs over the input in window steps, and the
    weights' rows of 27 are not 16-byte aligned); the NHWC one (64 channels) with 16-byte copies only
    (channels innermost in the input and the permuted weights: both tiles K-major). Both run
    on wgmma. Checked on the PTX of Triton's ahead-of-time compile, integers divisible by 16
    specialised as the launch specialises them. (Wider copies did not make it faster: the NHWC form
    was the slower at every tile measured; see docs/log/expert-notes.md.)"""
    import re

    def copies(channels: int) -> dict:
        ptx = conv2d_ptx(channels, nhwc=1)
        assert "wgmma.mma_async" in ptx
        return {width: len(re.findall(rf"cp\.async\.c[ag]\.shared\.global \[[^]]*\], \[[^]]*\], {width},", ptx))
                for width in ("0x4", "0x10")}

    nchw, nhwc = copies(3), copies(64)
    assert nchw["0x4"] > 0 and nchw["0x10"] == 0, nchw
    assert nhwc["0x4"] == 0 and nhwc["0x10"] > 0, nhwc


@pytest.mark.parametrize("moves", tiered([{"block": 32, "chunk": 16}, {"block": 32, "chunk": 16, "nhwc": 1}], fast={0}))
def test_conv2d_with_64_bit_offsets_is_judged_correct(tmp_path, monkeypatch, moves):
    """The implicit GEMM's offsets are 64-bit only where a tensor reaches 2**31 elements; that path,
    forced on a small problem, computes the same convolution (NCHW gather and NHWC)."""
    path = problem_variant(tmp_path, "conv2d.py", {"[3, 20, (3, 2), (2, 1), (1, 2), (2, 1), True]":
                                            "[20, 24, (3, 2), (2, 1), (1, 2), (2, 1), True]",
                                            "torch.randn(2, 3, 13, 17)": "torch.randn(2, 20, 13, 17)"})

    def forced(source):
        assert source.count(">= 2**31") == 1
        return source.replace(">= 2**31", ">= 0")
    judged_correct(path, moves, tmp_path, monkeypatch, edit=forced)


def test_32_bit_offsets_keep_the_implicit_gemm_from_spilling(tmp_path, conv2d_ptx):
    """Why offsets are 32-bit where they can be: compiled for sm_90 (L1/55's convolution, 64 -> 128
    channels, 3x3; 128 x 128 tiles, 32 along K, 8 warps, 3 stages, tf32x3), ptxas reports far fewer
    bytes of register spills without the 64-bit ones, gathering NCHW and reading NHWC alike (the
    bytes: docs/log/expert-notes.md)."""
    import re
    import subprocess

    pytest.importorskip("triton")
    from triton.backends.nvidia.compiler import get_ptxas

    def spilled(nhwc: int, wide: bool) -> int:
        ptx = tmp_path / f"conv_{nhwc}_{wide}.ptx"
        ptx.write_text(conv2d_ptx(64, nhwc, wide))
        report = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name", "sm_90a", str(ptx), "-o", str(ptx.with_suffix(".cubin"))],
                                capture_output=True, text=True, check=True)
        return int(re.search(r"(\d+) bytes spill stores", report.stdout + report.stderr).group(1))

    for nhwc in (0, 1):
        narrow, wide = spilled(nhwc, False), spilled(nhwc, True)
        assert narrow * 3 < wide, (nhwc, narrow, wide)


@pytest.mark.parametrize("fixture,moves", [("conv_epilogue.py", {"block": 128, "channels_last": 1}),
                                           ("convtranspose_add.py", {"block": 256, "warps": 2, "channels_last": 1})])
def test_channels_last_conv_epilogues_are_judged_correct(tmp_path, monkeypatch, fixture, moves):
    """The channels_last move on a convolution with a fused elementwise tail (KernelBench L2/1,
    2/16, 2/71): cuDNN runs the convolution in NHWC (its tensor-core kernels' layout), the fused pass
    walks the output in that order, per-channel parameters and the other inputs indexed to match;
    the output keeps the reference's values and shape (its strides NHWC), judged correct."""
    import torch

    problem = load_problem(str(HERE / fixture))
    source, _ = generate(problem, moves)
    assert source.splitlines()[0].endswith("channels last") and "torch.channels_last" in source
    from loopwise.kernels.expert.proposer import ExpertProposer

    assert ExpertProposer._parse_moves(source)["channels_last"] == 1
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = load_candidate(source, tmp_path, f"nhwc_{fixture[:-3]}")
    reference = problem.load_module()
    torch.manual_seed(0)
    model = module.ModelNew(*reference.get_init_inputs())
    torch.manual_seed(0)
    ref_model = reference.Model(*reference.get_init_inputs())
    inputs = reference.get_inputs()
    with torch.no_grad():
        out, expected = model(*inputs), ref_model(*inputs)
    layout = torch.channels_last if out.dim() == 4 else torch.channels_last_3d
    assert out.is_contiguous(memory_format=layout) and out.shape == expected.shape
    assert torch.allclose(out, expected, atol=1e-5, rtol=1e-5)
    judged_correct(HERE / fixture, moves, tmp_path, monkeypatch)


@pytest.mark.gpu
def test_channels_last_conv_epilogue_is_judged_correct_on_the_gpu(tmp_path):
    """On a GPU (cuDNN's NHWC kernels, TF32 under relaxed) the channels-last candidate is correct."""
    problem = load_problem(str(HERE / "conv_epilogue.py"))
    for precision in ("fp32", "relaxed"):
        source, _ = generate(problem, {"block": 128, "channels_last": 1}, precision=precision)
        cfg = EvalConfig(perf_trials=10, energy=False, precision=precision,
                         tolerance="strict" if precision == "fp32" else "legacy")
        with LocalJudge(problem, cfg, device="cuda", log_dir=tmp_path, spares=0) as judge:
            ev = judge.evaluate(source, f"nhwc-{precision}")
        assert ev.status is Status.CORRECT, (precision, ev.summary(), ev.log[-1500:])


@pytest.mark.gpu
def test_nhwc_implicit_gemm_convolutions_are_judged_correct_on_the_gpu(tmp_path):
    """On a GPU (wgmma, 16-byte copies) the NHWC implicit GEMMs are correct under both policies: a
    lone Conv2d of 64 channels with stride, padding and dilation (conv2d), and a partition with two
    NHWC convolutions and a fused epilogue (graph_conv)."""
    conv = problem_variant(tmp_path, "conv2d.py", {"[3, 20, (3, 2), (2, 1), (1, 2), (2, 1), True]":
                                            "[64, 72, (3, 2), (2, 1), (1, 2), (2, 1), True]",
                                            "torch.randn(2, 3, 13, 17)": "torch.randn(4, 64, 37, 29)"})
    graph = problem_variant(tmp_path, "partial_groupnorm.py", {
        "in_channels=3, out_channels=8": "in_channels=64, out_channels=48",
        "torch.randn(2, 3, 13, 11)": "torch.randn(4, 64, 33, 27)",
        "x = self.conv(x)": "x = self.conv2(torch.relu(self.conv(x)))",
        "self.norm = nn.GroupNorm(groups, out_channels)":
        "self.norm = nn.GroupNorm(groups, out_channels)\n        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)"})
    for path, moves in ((conv, {"nhwc": 1}), (graph, {"template": "graph_conv", "nhwc": 1})):
        problem = load_problem(str(path))
        for precision in ("fp32", "relaxed"):
            source, _ = generate(problem, moves, precision=precision)
            assert "permute(0, 2, 3, 1)" in source
            cfg = EvalConfig(perf_trials=10, energy=False, precision=precision,
                             tolerance="strict" if precision == "fp32" else "legacy")
            with LocalJudge(problem, cfg, device="cuda", log_dir=tmp_path, spares=0) as judge:
                ev = judge.evaluate(source, f"nhwc-{path.stem}-{precision}")
            assert ev.status is Status.CORRECT, (path.stem, precision, ev.summary(), ev.log[-1500:])


@pytest.mark.parametrize("init,shape,moves", [
    (None, "(2, 3, 5, 4, 6)", {"block": 32, "chunk": 16}),  # 3x2x2, stride (2,1,1), padding (1,0,2), dilation (1,2,1), bias
    ("[3, 64, (3, 5, 7), (1, 1, 1), (0, 0, 0), (1, 1, 1), False]", "(1, 3, 5, 9, 11)", {"block": 64, "chunk": 32}),  # L1/60's kernel
    ("[5, 7, (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1), False]", "(3, 5, 1, 2, 3)", {"block": 16, "chunk": 16, "warps": 4}),  # tiny
])
def test_conv3d_as_implicit_gemm_is_judged_correct(tmp_path, monkeypatch, init, shape, moves):
    """A lone nn.Conv3d (KernelBench L1/54, 59, 60, 66) is an implicit GEMM too: output voxels x
    output channels, K = (channel, kd, kh, kw) gathered from the NCDHW input; the channel tile is the
    output's channels rounded up to a power of two (20 -> 32, 64, 7 -> 16), never wider than the
    voxel tile. Judged against PyTorch in the interpreter, non-power-of-two and tiny shapes included."""
    from loopwise.kernels.expert.generate import default_moves

    replacements = {"[3, 20, (3, 2, 2), (2, 1, 1), (1, 0, 2), (1, 2, 1), True]": init} if init else {}
    replacements |= {"torch.randn(2, 3, 7, 9, 11)": f"torch.randn{shape}"}
    pattern = judged_variant(tmp_path, monkeypatch, "conv3d.py", "conv3d", moves, replacements)
    out_channels = dict(pattern.params)["out_channels"]
    source = render(pattern, moves)
    block_n = min(moves["block"], {20: 32, 64: 64, 7: 16}[out_channels])
    assert f"BN={block_n}," in source and f"x {block_n} channels" in source
    assert ExpertProposer._parse_moves(source) == {"template": "conv3d", **default_moves(pattern), **moves}
    assert 'input_precision="tf32x3"' in source and 'input_precision="tf32"' in render(pattern, moves, "relaxed")


def _fits_hopper(got: dict, spills: bool = False) -> bool:
    """Compiled for sm_90 to wgmma, within a block's shared memory, and without register spills
    (unless ``spills``)."""
    from loopwise.kernels.expert.generate import HOPPER_SHARED_BYTES

    assert got["wgmma"] and (spills or got["spill_bytes"] == 0), got
    assert 0 < got["shared_bytes"] <= HOPPER_SHARED_BYTES, got
    return True


@pytest.mark.parametrize("precision", ["fp32", "relaxed"])
def test_conv3d_default_tile_compiles_to_wgmma_for_hopper(tmp_path, precision):
    """L1/54's convolution at its own sizes (3 -> 64 channels, 3x3x3, 16 x 64^3 inputs) with the
    default moves, launched on the meta device and compiled ahead of time for sm_90 as that launch
    specialises it: 128 voxels x 64 channels, 16 along K, 4 warps, on wgmma, within a block's
    shared memory, in tf32x3 or TF32. Triton spills some registers there (8 warps: none), yet 4
    warps was the fastest candidate on the level-1 3-D convolutions measured
    (docs/log/expert-notes.md)."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert.aot import compile_for_hopper

    path = problem_variant(tmp_path, "conv3d.py", {"[3, 20, (3, 2, 2), (2, 1, 1), (1, 0, 2), (1, 2, 1), True]":
                                            "[3, 64, (3, 3, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1), False]",
                                            "torch.randn(2, 3, 7, 9, 11)": "torch.randn(16, 3, 64, 64, 64)"})
    problem = load_problem(str(path))
    source = render(capture(problem), precision=precision)
    assert "BM=128, BN=64, BK=16, num_warps=4" in source
    assert _fits_hopper(compile_for_hopper(source, problem), spills=True)


def test_conv3d_with_64_bit_offsets_is_judged_correct(tmp_path, monkeypatch):
    """The 64-bit offsets (a tensor of 2**31 elements or more), forced on a small problem."""
    def forced(source):
        assert source.count(">= 2**31") == 1
        return source.replace(">= 2**31", ">= 0")
    path = problem_variant(tmp_path, "conv3d.py", {"torch.randn(2, 3, 7, 9, 11)": "torch.randn(1, 3, 5, 4, 6)"})
    judged_correct(path, {"block": 32, "chunk": 16}, tmp_path, monkeypatch, edit=forced)


@pytest.mark.parametrize("module,init,shape,moves", tiered([
    # 3x2 kernel, stride (3, 2), padding (1, 0), output padding (2, 1), dilation (2, 1), bias
    ("nn.ConvTranspose2d", None, "(2, 5, 4, 5)", {"block": 32, "chunk": 16}),
    # L1/81's form: stride 5, dilation 2: three of the five phases per dimension have one window
    # position, two have none (bias alone; here no bias: zeros)
    ("nn.ConvTranspose2d", "[4, 6, (3, 3), (5, 5), (1, 1), (0, 0), (2, 2), False]", "(1, 4, 4, 5)", {"block": 32, "chunk": 16}),
    ("nn.ConvTranspose3d", "[5, 9, (3, 2, 3), (2, 1, 2), (1, 0, 1), (1, 0, 0), (2, 1, 1), True]", "(1, 5, 3, 3, 4)",
     {"block": 32, "chunk": 16, "warps": 4}),
    ("nn.ConvTranspose3d", "[3, 7, (1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1), True]", "(1, 3, 1, 1, 2)",
     {"block": 16, "chunk": 16}),  # tiny
    ("nn.ConvTranspose1d", "[6, 5, (4,), (3,), (2,), (1,), (2,), True]", "(2, 6, 9)", {"block": 32, "chunk": 16}),
], fast={0, 3, 4}))
def test_transposed_convolutions_as_implicit_gemm_are_judged_correct(tmp_path, monkeypatch, module, init, shape, moves):
    """A lone nn.ConvTranspose1d / 2d / 3d (KernelBench L1/58, 61, 71, 77, 81) in gather form, one stride
    phase per program, visiting only the window positions whose input index is whole for that
    phase: judged against PyTorch in the interpreter, phases without a position and tiny shapes
    included."""
    replacements = {"[5, 20, (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True]": init} if init else {}
    replacements |= {"torch.randn(2, 5, 6, 7)": f"torch.randn{shape}", "nn.ConvTranspose2d": module}
    pattern = judged_variant(tmp_path, monkeypatch, "conv_transpose.py", "conv_transpose", moves, replacements)
    from loopwise.kernels.expert.generate import default_moves

    source = render(pattern, moves)
    assert ExpertProposer._parse_moves(source) == {"template": "conv_transpose", **default_moves(pattern), **moves}
    leading = {"nn.ConvTranspose1d": 2, "nn.ConvTranspose2d": 1, "nn.ConvTranspose3d": 0}[module]
    assert f"*(1,) * {leading}," in source


def test_transposed_convolution_phases_visit_only_whole_window_positions(tmp_path):
    """The taps table: per dimension and stride phase, the first window position whose input index
    is whole and how many (they step by stride / gcd(stride, dilation)). L1/81's height: stride 5,
    padding 1, dilation 2, kernel 3 -> phases 1, 3, 4 take positions 1, 2, 0; phases 0 and 2 none."""
    from loopwise.kernels.expert.generate import conv_transpose_values

    pattern = capture(load_problem(str(problem_variant(tmp_path, "conv_transpose.py", {
        "[5, 20, (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True]": "[4, 6, (3, 3), (5, 5), (1, 1), (0, 0), (2, 2), False]"}))))
    values = conv_transpose_values(pattern)
    assert values["kernel3"] == (1, 3, 3) and values["stride3"] == (1, 5, 5) and values["phases"] == 25
    depth, height = values["taps"][:2], values["taps"][2:12]
    assert depth == [0, 1]  # a 2-D convolution: one phase, one position in depth
    assert height == [0, 1, 0, 2, 0] + [0, 1, 0, 1, 1]
    assert values["steps"] == (1, 5, 5)
    even = capture(load_problem(str(problem_variant(tmp_path, "conv_transpose.py", {
        "[5, 20, (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True]": "[4, 6, (5, 5), (2, 2), (0, 0), (0, 0), (2, 1), False]"}))))
    values = conv_transpose_values(even)  # stride 2, dilation 2: even phases take every position, odd none
    assert values["taps"][2:6] == [0, 0, 5, 0] and values["steps"][1] == 1
    grouped = capture(load_problem(str(problem_variant(tmp_path, "conv_transpose.py", {
        "dilation=dilation, bias=bias)": "dilation=dilation, bias=bias, groups=5)"}))))
    assert grouped.kind == "conv_transpose" and dict(grouped.params)["groups"] == 5
    assert "groups" not in dict(pattern.params)  # one group: the pattern as it always was


@pytest.mark.parametrize("module,init,groups,shape", [
    # five groups of one input channel and four output channels each: a tile of 16 channels spans
    # past its group's four, which the mask keeps out of the next group (KernelBench L1/75's form)
    pytest.param("nn.ConvTranspose2d", None, 5, "(2, 5, 4, 5)", marks=pytest.mark.slow),
    pytest.param("nn.ConvTranspose3d", "[6, 9, (3, 2, 3), (2, 1, 2), (1, 0, 1), (1, 0, 0), (1, 1, 1), True]", 3,
                 "(1, 6, 3, 3, 4)", marks=pytest.mark.slow),  # L1/72's
    ("nn.ConvTranspose1d", "[4, 6, (3,), (2,), (1,), (1,), (2,), True]", 2, "(2, 4, 7)"),
])
def test_grouped_transposed_convolutions_are_judged_correct(tmp_path, monkeypatch, module, init, groups, shape):
    """Each group reads its own input channels and writes its own output channels (and bias)."""
    replacements = {"[5, 20, (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True]": init} if init else {}
    replacements |= {"torch.randn(2, 5, 6, 7)": f"torch.randn{shape}", "nn.ConvTranspose2d": module,
                     "dilation=dilation, bias=bias)": f"dilation=dilation, bias=bias, groups={groups})"}
    pattern = judged_variant(tmp_path, monkeypatch, "conv_transpose.py", "conv_transpose",
                             {"block": 32, "chunk": 16, "warps": 4}, replacements)
    assert dict(pattern.params)["groups"] == groups


@pytest.mark.parametrize("module,init,shape,precision", [
    ("nn.ConvTranspose2d", "[32, 32, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), False]", "(8, 32, 512, 1024)", "fp32"),  # L1/71
    ("nn.ConvTranspose3d", "[48, 48, (3, 3, 3), (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1), False]", "(8, 48, 64, 64, 64)",
     "relaxed"),  # L1/61
])
def test_transposed_convolution_default_tile_compiles_to_wgmma(tmp_path, module, init, shape, precision):
    """The default moves (128 outputs x the output channels, 16 input channels a step, 4 warps:
    the fastest or close to it on the problems measured, docs/log/expert-notes.md), launched at the
    problems' own sizes on the meta device and compiled ahead of time for sm_90, run on wgmma
    within a block's shared memory (Triton spills some registers there, 8 warps none)."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert.aot import compile_for_hopper

    path = problem_variant(tmp_path, "conv_transpose.py", {
        "[5, 20, (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True]": init, "torch.randn(2, 5, 6, 7)": f"torch.randn{shape}",
        "nn.ConvTranspose2d": module})
    problem = load_problem(str(path))
    pattern = capture(problem)
    source = render(pattern, precision=precision)
    channels = dict(pattern.params)["in_channels"]
    assert f"BM=128, BN={1 << (channels - 1).bit_length()}, BK=16," in source and "num_warps=4)" in source
    assert _fits_hopper(compile_for_hopper(source, problem), spills=True)


@pytest.mark.gpu
def test_conv3d_transposed_and_separable_convolutions_are_judged_correct_on_the_gpu(tmp_path):
    """On a GPU (wgmma, the pipelined gathers) the Conv3d and transposed-convolution implicit GEMMs
    and the one-pass separable convolution are correct under both policies, with their default
    moves and a smaller tile: L1/60's form of Conv3d, L1/81's (stride 5, dilation 2) and L1/61's
    forms of transposed convolution, L1/86's separable one, at reduced sizes."""
    cases = [
        problem_variant(tmp_path, "conv3d.py", {"[3, 20, (3, 2, 2), (2, 1, 1), (1, 0, 2), (1, 2, 1), True]":
                                         "[3, 64, (3, 5, 7), (1, 1, 1), (0, 0, 0), (1, 1, 1), False]",
                                         "torch.randn(2, 3, 7, 9, 11)": "torch.randn(2, 3, 19, 23, 29)"}),
        problem_variant(tmp_path, "conv_transpose.py", {
            "[5, 20, (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True]": "[32, 64, (3, 3), (5, 5), (1, 1), (0, 0), (2, 2), True]",
            "torch.randn(2, 5, 6, 7)": "torch.randn(2, 32, 17, 23)"}),
    ]
    three_d = (HERE / "conv_transpose.py").read_text().replace("nn.ConvTranspose2d", "nn.ConvTranspose3d").replace(
        "[5, 20, (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True]", "[48, 48, (3, 3, 3), (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1), False]").replace(
        "torch.randn(2, 5, 6, 7)", "torch.randn(2, 48, 9, 11, 13)")
    (tmp_path / "conv_transpose3d.py").write_text(three_d)
    cases.append(tmp_path / "conv_transpose3d.py")
    cases.append(problem_variant(tmp_path, "separable_conv.py", {"torch.randn(2, 20, 9, 11)": "torch.randn(2, 20, 37, 41)"}))
    for path in cases:
        problem = load_problem(str(path))
        for precision in ("fp32", "relaxed"):
            for moves in ({}, {"block": 64, "warps": 4, "chunk": 16}):
                source, pattern = generate(problem, moves, precision=precision)
                assert source is not None, pattern.reason
                cfg = EvalConfig(perf_trials=10, energy=False, precision=precision,
                                 tolerance="strict" if precision == "fp32" else "legacy")
                with LocalJudge(problem, cfg, device="cuda", log_dir=tmp_path, spares=0) as judge:
                    ev = judge.evaluate(source, f"{path.stem}-{precision}-{len(moves)}")
                assert ev.status is Status.CORRECT, (path.stem, precision, moves, ev.summary(), ev.log[-1500:])


@pytest.mark.parametrize("init,shape,moves", tiered([
    (None, "(2, 20, 9, 11)", {"block": 32, "chunk": 16}),  # 3x2, stride (2, 1), padding (1, 2), dilation (2, 1), biases
    ("[5, 40, (3, 3), (1, 1), (1, 1), (1, 1), False]", "(1, 5, 7, 6)", {"block": 16, "chunk": 16, "warps": 4}),  # L1/86's form
], fast={1}))
def test_separable_convolution_in_one_pass_is_judged_correct(tmp_path, monkeypatch, init, shape, moves):
    """A depthwise Conv2d and then a pointwise 1x1 one (KernelBench L1/86) become one kernel: the
    depthwise outputs of a tile in registers, multiplied by the pointwise weights on the tensor cores;
    judged against PyTorch in the interpreter (channels beyond a chunk, odd sizes)."""
    replacements = {"[20, 24, (3, 2), (2, 1), (1, 2), (2, 1), True]": init} if init else {}
    replacements |= {"torch.randn(2, 20, 9, 11)": f"torch.randn{shape}"}
    pattern = judged_variant(tmp_path, monkeypatch, "separable_conv.py", "separable_conv", moves, replacements)
    from loopwise.kernels.expert.generate import default_moves

    source = render(pattern, moves)
    assert ExpertProposer._parse_moves(source) == {"template": "separable_conv", **default_moves(pattern), **moves}
    assert "self.depthwise" in source and "self.pointwise" in source


@pytest.mark.parametrize("kernel,moves,stages", [
    (3, {}, 3),  # the default: 128 pixels x 16 channels a step
    (3, {"chunk": 32}, 2),  # 3 stages: 354 KiB, more than a block may take (docs/log/expert-notes.md)
    (3, {"block": 64, "chunk": 64}, 2),
    (5, {"block": 64}, 3),  # 219 KiB at 3 stages
    (5, {}, 1),
])
def test_separable_convolution_tiles_compile_to_wgmma_within_shared_memory(tmp_path, kernel, moves, stages):
    """L1/86's separable convolution at its own sizes (64 -> 64 depthwise 3x3, 64 -> 128 pointwise,
    16 x 64 x 512^2 inputs), and with a 5x5 window, compiled ahead of time for sm_90 in tf32x3:
    the pipeline keeps as many stages as fit in a block's shared memory (Triton prefetches every
    tap's input tile per stage), on wgmma, without register spills (4 warps spilled; see
    docs/log/expert-notes.md). With 5x5 taps the
    gathers of 25 taps in flight spill a little (272 bytes at block 64): allowed there."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert.aot import compile_for_hopper

    path = problem_variant(tmp_path, "separable_conv.py", {
        "[20, 24, (3, 2), (2, 1), (1, 2), (2, 1), True]": f"[64, 128, ({kernel}, {kernel}), (1, 1), (1, 1), (1, 1), False]",
        "torch.randn(2, 20, 9, 11)": "torch.randn(16, 64, 512, 512)"})
    problem = load_problem(str(path))
    source = render(capture(problem), moves)
    sizes = {"block": 128, "chunk": 16, **moves}
    assert (f"BM={sizes['block']}, BN={min(128, sizes['block'])}, BK={sizes['chunk']}, num_warps=8, "
            f"num_stages={stages}") in source
    assert _fits_hopper(compile_for_hopper(source, problem), spills=kernel == 5)

