"""The compiler seed's ``conv`` move on Inductor's library convolutions: each
``extern_kernels.convolution`` (not transposed, 1 to 3 spatial dimensions, any groups) launched as
an implicit-GEMM Triton convolution of the expert's form, the pointwise kernel that alone reads its
output fused as its epilogue. Records are written in Inductor's format by :func:`conv_record` (its
layout of ``call()``: the library call, its ``assert_size_stride``, the buffer reused in place by
the bias-and-activation kernel) and judged by the real judge on the CPU, in Triton's interpreter;
each is first judged as Inductor wrote it (the library call), so the record itself is right."""

import dataclasses
import math
import re
import sys
from pathlib import Path

import pytest

from loopwise.core.propose import ProposalRequest
from loopwise.kernels.expert.elementwise import Unsupported
from loopwise.kernels.expert.inductor.extract import InductorRecord, KernelRecord
from loopwise.kernels.expert.inductor.gemm import cutlass_pays, cutlass_unfit, find_sites, pays, transposed_mode
from loopwise.kernels.expert.inductor.standalone import parse_note, render_seed
from loopwise.kernels.expert.proposer import ExpertProposer
from loopwise.kernels.problem import load_problem

sys.path.insert(0, str(Path(__file__).parents[1]))  # the expert tests' shared helpers
from expert_judging import judge_on_cpu  # noqa: E402

HEADER = '''from torch import device, empty_strided
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels
import triton
import triton.language as tl
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
async_compile = AsyncCompile()
'''
POINTWISE = '''def triton_poi_fused_convolution_relu_0(in_out_ptr0, in_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = {numel}
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x3 = xindex
    x1 = {channel}
    tmp0 = tl.load(in_out_ptr0 + (x3), xmask)
    tmp1 = tl.load(in_ptr0 + (x1), xmask, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp3 = tl.full([1], 0, tl.int32)
    tmp4 = triton_helpers.maximum(tmp3, tmp2)
    tl.store(in_out_ptr0 + (x3), tmp4, xmask)
'''
PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv{dims}d({c}, {co}, {k}, stride={stride}, padding={padding}, dilation={dilation}, groups={groups}{bias})

    def forward(self, x):
        return {forward}


def get_inputs():
    return [torch.randn{x}]


def get_init_inputs():
    return []
'''


def strides(sizes, order=None):
    """Dense strides of ``sizes`` with dimensions laid out innermost-last in ``order`` (default: as given)."""
    order = order or list(range(len(sizes)))
    out, step = [0] * len(sizes), 1
    for d in reversed(order):
        out[d], step = step, step * sizes[d]
    return tuple(out)


def conv_record(tmp_path, x, co, k, stride=1, padding=0, dilation=1, groups=1, channels_last=False,
                fused=True, returned=False, library_bias=False, transposed=False, output_padding=0):
    """A problem (``nn.Conv{d}d`` then ReLU, or the lone convolution with its bias) and Inductor's
    record of it as Inductor writes one: the convolution with ``bias=None`` into a buffer that the
    bias-and-ReLU pointwise kernel then updates in place (``fused``); with ``returned`` the
    convolution's output is also returned (so no kernel can be its epilogue); with
    ``library_bias`` the library call adds the bias and nothing follows (a lone convolution); with
    ``transposed`` the problem's is ``nn.ConvTranspose{d}d`` and the call's ``transposed=True``."""
    dims = len(x) - 2
    c = x[1]
    ks, ss, ps, ds = ((v,) * dims if isinstance(v, int) else tuple(v) for v in (k, stride, padding, dilation))
    if transposed:
        spatial = tuple((x[2 + i] - 1) * ss[i] - 2 * ps[i] + ds[i] * (ks[i] - 1) + output_padding + 1
                        for i in range(dims))
    else:
        spatial = tuple((x[2 + i] + 2 * ps[i] - ds[i] * (ks[i] - 1) - 1) // ss[i] + 1 for i in range(dims))
    out = (x[0], co, *spatial)
    out_strides = strides(out, [0, *range(2, 2 + dims), 1] if channels_last else None)
    w = (c, co // groups, *ks) if transposed else (co, c // groups, *ks)
    numel = math.prod(out)
    channel = "(xindex % {co})".format(co=co) if channels_last else f"((xindex // {math.prod(spatial)}) % {co})"
    t = lambda v: "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"  # noqa: E731
    conv = (f"extern_kernels.convolution(arg0_1, arg1_1, stride={t(ss)}, padding={t(ps)}, dilation={t(ds)}, "
            f"transposed={transposed}, output_padding={t((output_padding,) * dims)}, groups={groups}, bias={'arg2_1' if library_bias else 'None'})")
    lines = [f"assert_size_stride(arg0_1, {t(x)}, {t(strides(x))})",
             f"assert_size_stride(arg1_1, {t(w)}, {t(strides(w))})",
             f"assert_size_stride(arg2_1, ({co}, ), (1, ))",
             "with torch.cuda._DeviceGuard(0):",
             "    torch.cuda.set_device(0)",
             "    # Topologically Sorted Source Nodes: [conv], Original ATen: [aten.convolution]",
             f"    buf0 = {conv}",
             f"    assert_size_stride(buf0, {t(out)}, {t(out_strides)}, 'torch.ops.aten.convolution.default')",
             "    del arg0_1",
             "    del arg1_1"]
    if library_bias:
        lines += ["    del arg2_1", "return (buf0, )"]
        kernels, forward = [], "self.conv(x)"
    elif returned:
        lines += [f"    buf1 = empty_strided_cuda({t(out)}, {t(out_strides)}, torch.float32)",
                  "    stream0 = get_raw_stream(0)",
                  f"    triton_poi_fused_convolution_relu_0.run(buf0, arg2_1, buf1, {numel}, stream=stream0)",
                  "    del arg2_1", "return (buf1, buf0, )"]
        kernels, forward = [], "torch.relu(self.conv(x)), self.conv(x) - self.conv.bias.view(1, -1" + ", 1" * dims + ")"
    else:
        lines += ["    buf1 = buf0; del buf0  # reuse",
                  "    # Topologically Sorted Source Nodes: [conv, relu], Original ATen: [aten.convolution, aten.relu]",
                  "    stream0 = get_raw_stream(0)",
                  f"    triton_poi_fused_convolution_relu_0.run(buf1, arg2_1, {numel}, stream=stream0)",
                  "    del arg2_1", "return (buf1, )"]
        kernels, forward = [], "torch.relu(self.conv(x))"
    src = POINTWISE.format(numel=numel, channel=channel)
    names = ["in_out_ptr0", "in_ptr0", "xnumel", "XBLOCK"]
    if returned:  # reads the convolution's output, writes another buffer
        src = (src.replace("(in_out_ptr0, in_ptr0, xnumel", "(in_ptr1, in_ptr0, out_ptr0, xnumel")
               .replace("tl.load(in_out_ptr0", "tl.load(in_ptr1").replace("tl.store(in_out_ptr0", "tl.store(out_ptr0"))
        names = ["in_ptr1", "in_ptr0", "out_ptr0", "xnumel", "XBLOCK"]
    if not library_bias:
        kernels = [KernelRecord(name="triton_poi_fused_convolution_relu_0", src=src, arg_names=names,
                                config={"XBLOCK": 128}, num_warps=4, num_stages=1,
                                grid={"prefix": [], "x": "-((xnumel) // -(XBLOCK))", "y": "1", "z": "1"},
                                grid_symbolic=True, constants={}, kind="POINTWISE")]
    kernel_defs = "".join(f"{k.name} = async_compile.triton('{k.name}', '''\nimport triton\n\n@triton.jit\n{k.src}''', "
                          "device_str='cuda')\n\n" for k in kernels)
    body = "\n".join("        " + line for line in lines)
    module = (HEADER + "\n\n" + kernel_defs + "async_compile.wait(globals())\ndel async_compile\n\n"
              "class Runner:\n    def __init__(self, partitions):\n        self.partitions = partitions\n\n"
              "    def call(self, args):\n        arg0_1, arg1_1, arg2_1 = args\n        args.clear()\n"
              + body + "\n\nrunner = Runner(partitions=[])\ncall = runner.call\n\n\n"
              "def get_args():\n    from torch._dynamo.testing import rand_strided\n"
              f"    arg0_1 = rand_strided({t(x)}, {t(strides(x))}, device='cuda:0', dtype=torch.float32)\n"
              f"    arg1_1 = rand_strided({t(w)}, {t(strides(w))}, device='cuda:0', dtype=torch.float32)\n"
              f"    arg2_1 = rand_strided(({co}, ), (1, ), device='cuda:0', dtype=torch.float32)\n"
              "    return [arg0_1, arg1_1, arg2_1]\n")
    rec = InductorRecord(module=module, kernels=kernels,
                         inputs=["arg:x", "self.get_parameter('conv.weight')", "self.get_parameter('conv.bias')"],
                         outputs=2 if returned else 0, extern=["extern_kernels.convolution"], torch="2.11.0+cu130",
                         triton="3.6.0", device_name="NVIDIA H200")
    path = tmp_path / f"conv{dims}d.py"
    kind = f"{'Transpose' if transposed else ''}{dims}"
    path.write_text(PROBLEM.format(dims=kind, c=c, co=co, k=tuple(ks), stride=tuple(ss), padding=tuple(ps),
                                   dilation=tuple(ds), groups=groups, forward=forward, x=t(x),
                                   bias=f", output_padding={output_padding}" if output_padding else ""))
    return rec, load_problem(str(path))


def judged(problem, source, name, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    judge_on_cpu(problem, source, name, tmp_path)


def test_a_conv2d_then_bias_and_relu_becomes_one_implicit_gemm_with_the_pointwise_kernel_as_epilogue(tmp_path, monkeypatch):
    from loopwise.kernels.check import scan

    rec, problem = conv_record(tmp_path, (2, 6, 11, 13), 20, 3, stride=2, padding=1)
    judged(problem, render_seed(rec, problem), "seed-conv-library", tmp_path, monkeypatch)  # the record is right
    (site,) = find_sites(rec)
    assert (site.op, site.shape, site.k) == ("convolution", (2, 20, 6, 7), 6 * 9)
    source = render_seed(rec, problem, {"conv": 1})
    assert "extern_kernels.convolution(" not in source and "triton_poi_fused_convolution_relu_0.run(" not in source
    assert "buf0 = empty_strided_cuda((2, 20, 6, 7), (840, 42, 7, 1), torch.float32)" in source
    assert "seed_gemm_0_launch(*_seed_gemm_0_operands, buf1, buf1, arg2_1, 1680)" in source
    assert "extern_kernels.convolution into buf0 -> Triton implicit-GEMM convolution (tf32x3) with " \
           "triton_poi_fused_convolution_relu_0 as its epilogue" in source
    assert 'input_precision="tf32x3"' in source and "Library calls: none" in source
    assert [r.code for r in scan(source) if r.severity != "info"] == []
    judged(problem, source, "seed-conv-fused", tmp_path, monkeypatch)


@pytest.mark.parametrize("case", [
    dict(x=(2, 4, 9), co=12, k=3, stride=2, padding=2, dilation=2),  # 1-d, strided and dilated
    dict(x=(1, 8, 5, 7, 6), co=10, k=(3, 1, 2), padding=(1, 0, 1)),  # 3-d, a window of three shapes
    dict(x=(2, 8, 9, 9), co=12, k=3, padding=1, groups=4),  # grouped: 2 input, 3 output channels a group
    dict(x=(2, 6, 8, 8), co=16, k=3, padding=1, channels_last=True),  # Inductor's channels-last layout
])
def test_other_dimensions_groups_and_layouts_are_judged_correct(case, tmp_path, monkeypatch):
    rec, problem = conv_record(tmp_path, **case)
    (site,) = find_sites(rec)
    assert site.fused is not None, site.reason
    judged(problem, render_seed(rec, problem, {"conv": 1}), "seed-conv", tmp_path, monkeypatch)


def test_an_output_also_returned_is_written_and_the_pointwise_kernel_stays(tmp_path, monkeypatch):
    rec, problem = conv_record(tmp_path, (2, 6, 10, 10), 8, 3, returned=True)
    judged(problem, render_seed(rec, problem), "seed-conv-library", tmp_path, monkeypatch)
    (site,) = find_sites(rec)
    assert site.fused is None and "read again" in site.reason
    source = render_seed(rec, problem, {"conv": 1})
    assert "seed_gemm_0_launch(arg0_1, arg1_1, None, buf0)" in source
    assert "triton_poi_fused_convolution_relu_0.run(buf0, arg2_1, buf1" in source
    judged(problem, source, "seed-conv-unfused", tmp_path, monkeypatch)


def test_a_lone_convolution_left_to_cudnn_is_seeded_through_the_move_with_its_bias_in_the_tile(tmp_path, monkeypatch):
    rec, problem = conv_record(tmp_path, (2, 5, 12, 12), 7, 3, padding=1, library_bias=True)
    with pytest.raises(Unsupported, match="library calls only: extern_kernels.convolution"):
        render_seed(rec, problem)
    source = render_seed(rec, problem, {"conv": 1})
    assert "seed_gemm_0_launch(arg0_1, arg1_1, arg2_1, buf0)" in source and "Library calls: none" in source
    judged(problem, source, "seed-conv-only", tmp_path, monkeypatch)
    proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: rec, bandwidth_source=lambda device: 4247.0)
    seeds = [parse_note(p.content) for p in proposer.propose(ProposalRequest(task="", candidate="", n=3))]
    assert {"template": "inductor", "block": 0, "warps": 0, "cudagraph": 0, "gemm": 0, "gemm_tile": 0, "conv": 1} in seeds


def test_unreadable_convolutions_stay_library_calls(tmp_path):
    rec, _ = conv_record(tmp_path, (2, 6, 11, 13), 20, 3)
    for old, new in [("transposed=False", "transposed=True"),  # a (20, 6, 3, 3) weight transposed: 6 outputs, not 20
                     ("output_padding=(0, 0)", "output_padding=(1, 1)"),  # output padding on a forward one
                     ("            assert_size_stride(buf0, (2, 20, 9, 11), (1980, 99, 11, 1), "
                      "'torch.ops.aten.convolution.default')\n", "")]:  # no stated layout for the output
        assert old in rec.module, old
        assert find_sites(dataclasses.replace(rec, module=rec.module.replace(old, new))) == [], old


def test_the_triton_conv_move_is_never_first_the_cutlass_form_is_for_long_fp32_reductions(tmp_path):
    """The Triton form's gather ran slower than cuDNN's fp32 convolutions on an H100, so it is not
    among the first candidates; the CUTLASS form is, second, for a large fp32 convolution with a long
    reduction (64 channels x 3 x 3 here). The gemm move leaves convolutions alone and the conv move
    products."""
    rec, problem = conv_record(tmp_path, (16, 64, 56, 56), 128, 3, padding=1)  # 50176 pixels x 128 channels, K 576
    assert not pays(find_sites(rec), "fp32") and cutlass_pays(find_sites(rec), "fp32")
    assert not cutlass_pays(find_sites(rec), "relaxed")  # cuDNN's TF32 kernels use Hopper's own MMAs
    proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: rec, bandwidth_source=lambda device: 4247.0)
    first = [parse_note(p.content) for p in proposer.propose(ProposalRequest(task="", candidate="", n=3))]
    seed = {"template": "inductor", "block": 0, "warps": 0, "cudagraph": 0, "gemm": 0, "gemm_tile": 0, "conv": 0}
    assert first[:2] == [seed, {**seed, "conv": 3}]
    assert all((m or {}).get("conv") != 1 for m in first)
    assert proposer._fits({**seed, "conv": 1}) and not proposer._fits({**seed, "gemm": 1})  # a move the search may take
    with pytest.raises(Unsupported, match="no library GEMM to replace"):
        render_seed(rec, problem, {"gemm": 1})
    with pytest.raises(Unsupported, match="that CUTLASS likely runs faster under the relaxed policy"):
        render_seed(rec, problem, {"conv": 3}, precision="relaxed")
    assert "CUTLASS implicit-GEMM convolution" in render_seed(rec, problem, {"conv": 2}, precision="relaxed")
    assert "extern_kernels.convolution(" in render_seed(rec, problem, {"cudagraph": 1})
    assert "extern_kernels.convolution(" not in render_seed(rec, problem, {"conv": 1, "gemm_tile": 2})


@pytest.mark.parametrize("x,co,k,stride,transposed", [
    ((16, 8, 56, 56), 128, 3, 1, False),  # 8 channels x 3 x 3: a reduction of 72
    ((2, 64, 20, 20), 64, 3, 1, False),  # 576 long, but 0.1 GFLOP of work
    ((4, 8, 16, 48, 48), 64, 3, 1, False),  # 3-d, 8 input channels x 3 x 3 x 3: a reduction of 216, 8 GFLOP
    ((64, 3, 16, 32, 32), 16, 3, 2, True),  # 3-d transposed by stride phases, 3 input channels
    ((2, 16, 8, 16, 16), 32, 3, 2, True),  # by stride phases, 0.3 GFLOP of work
])
def test_the_cutlass_form_is_not_first_for_short_reductions_little_work_or_few_3d_channels(x, co, k, stride, transposed,
                                                                                           tmp_path):
    rec, problem = conv_record(tmp_path, x, co, k, stride=stride, padding=1, transposed=transposed)
    assert not cutlass_pays(find_sites(rec), "fp32")
    with pytest.raises(Unsupported, match="that CUTLASS likely runs faster"):
        render_seed(rec, problem, {"conv": 3})
    proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: rec, bandwidth_source=lambda device: 4247.0)
    first = [parse_note(p.content) for p in proposer.propose(ProposalRequest(task="", candidate="", n=3))]
    assert all(not (m or {}).get("conv") for m in first)


@pytest.mark.parametrize("x,co,k,stride,transposed", [
    ((8, 16, 16, 48, 48), 32, 3, 1, False),  # 3-d, 16 input channels
    ((4, 32, 8, 24, 24), 64, 4, 2, True),  # 3-d transposed, strided: by stride phases, 32 x 4 x 4 x 4 / 8 a pixel
    ((16, 16, 16, 32, 32), 32, 3, 2, True),  # by stride phases, a reduction of 16 x 3 x 3 x 3 / 8 = 54 a pixel
])
def test_the_cutlass_form_is_first_for_3d_convolutions_of_16_input_channels_or_more(x, co, k, stride, transposed,
                                                                                    tmp_path):
    rec, problem = conv_record(tmp_path, x, co, k, stride=stride, padding=1, transposed=transposed)
    (site,) = find_sites(rec)
    assert site.conv["channels"] == x[1] and cutlass_pays([site], "fp32") and not cutlass_pays([site], "relaxed")
    assert "CUTLASS implicit-GEMM convolution" in render_seed(rec, problem, {"conv": 3})


def test_a_lone_convolution_that_pays_is_seeded_in_the_cutlass_form(tmp_path):
    rec, problem = conv_record(tmp_path, (8, 32, 64, 64), 64, (5, 9), library_bias=True)  # KernelBench L1/62's shape, smaller
    proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: rec, bandwidth_source=lambda device: 4247.0)
    first = [parse_note(p.content) for p in proposer.propose(ProposalRequest(task="", candidate="", n=3))]
    assert {"template": "inductor", "block": 0, "warps": 0, "cudagraph": 0, "gemm": 0, "gemm_tile": 0, "conv": 3} in first


@pytest.mark.parametrize("variant,dtype", [(0, "float32"), (1, "float32"), (2, "float32"), (0, "float16")])
def test_a_large_convolution_compiles_for_hopper_on_the_tensor_cores_without_spilling(variant, dtype, tmp_path):
    """A ResNet-sized 3 x 3 convolution (64 -> 128 channels) with its bias-and-ReLU epilogue, under
    each ``gemm_tile`` (and in half precision): warp-group MMAs inside a block's shared memory, no
    register spilled."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert.aot import compile_for_hopper
    from loopwise.kernels.expert.generate import HOPPER_SHARED_BYTES

    rec, problem = conv_record(tmp_path, (16, 64, 56, 56), 128, 3, padding=1)
    rec = dataclasses.replace(rec, module=rec.module.replace("torch.float32", f"torch.{dtype}"))
    assert find_sites(rec)[0].dtype == dtype
    got = compile_for_hopper(render_seed(rec, problem, {"conv": 1, "gemm_tile": variant}), problem, kernel="seed_gemm_0")
    assert got["wgmma"] and 0 < got["shared_bytes"] <= HOPPER_SHARED_BYTES and got["spill_bytes"] == 0, got


@pytest.mark.parametrize("name,shape,fused", [
    ("h100__kb_l2_82_conv2d_tanh_scaling_biasadd_max", (128, 64, 254, 254), "triton_poi_fused_add_convolution_mul_tanh_2"),
    ("h100__kb_l2_1_conv2d_relu_biasadd", (128, 128, 126, 126), None),  # its pointwise kernel runs over two axes
    ("h100__kb_l1_62_conv2d_asymmetric_kernel", (8, 64, 508, 504), None),
])
def test_inductors_own_convolutions_recorded_on_an_h100_are_found_and_replaced(name, shape, fused):
    """Records of KernelBench problems Inductor compiled on an H100 (torch 2.11): the convolution's
    site is found from its real call, size check and argument types, and the rewritten call()
    launches the move's kernel instead of cuDNN's."""
    from loopwise.kernels.expert.inductor.gemm import rewrite

    rec = InductorRecord.from_json((Path(__file__).parent / "records" / f"{name}.json").read_text())
    (site,) = find_sites(rec)
    assert (site.op, site.shape, site.dtype) == ("convolution", shape, "float32")
    assert (site.fused.name if site.fused else None) == fused and (fused or site.reason)
    module = rewrite(rec, [site])
    assert "extern_kernels.convolution(" not in module and "seed_gemm_0_launch(" in module
    assert f"buf{site.out[3:]} = empty_strided_cuda({shape}" in module


# CUTLASS's convolution needs a GPU to build; on the CPU the file's extension loader is replaced by
# one whose lw_conv computes the same channels-last convolution with PyTorch, so the judge runs the
# rest of the file as written: the channels-last copies and padding, the batch cut, the Triton
# read-back kernel with the bias and the fused epilogue, in Triton's interpreter.
_LOADER = re.compile(r"def _lw_cutlass_conv\(name\):.*?    return ext\n", re.S)
_STAND_IN = '''class _StandIn:
    @staticmethod
    def lw_conv(x, w, y, padding, stride, dilation):
        assert x.is_contiguous() and w.is_contiguous() and y.is_contiguous()
        assert x.shape[-1] % 4 == 0 and w.shape[0] % 4 == 0 and y.shape[-1] == w.shape[0] and min(padding) >= 0
        conv = torch.nn.functional.conv3d if x.dim() == 5 else torch.nn.functional.conv2d
        # CUTLASS takes the output's sizes from y and reads zeros past the input's end: pad the end
        # so that torch's convolution reaches them, then keep y's sizes
        ends = [max(0, (o - 1) * s + d * (r - 1) + 1 - i - p) for o, s, d, r, i, p in
                zip(y.shape[1:-1], stride, dilation, w.shape[1:-1], x.shape[1:-1], padding)]
        xx = torch.nn.functional.pad(x.movedim(-1, 1), [v for e in reversed(ends) for v in (0, e)])
        out = conv(xx, w.movedim(-1, 1), None, stride, padding, dilation)
        y.copy_(out[(slice(None), slice(None), *(slice(0, o) for o in y.shape[1:-1]))].movedim(1, -1))


class _StandInDgrad:
    @staticmethod
    def lw_conv(x, w, y, padding, stride, dilation):  # the data gradient: x (N, P, Q, K), w (K, R, S, C)
        assert x.is_contiguous() and w.is_contiguous() and y.is_contiguous() and x.dim() == 4
        assert x.shape[-1] % 4 == 0 and w.shape[0] == x.shape[-1] and y.shape[-1] == w.shape[-1]
        assert w.shape[-1] % 4 == 0 and tuple(dilation) == (1, 1)  # CUTLASS's strided data gradient: dilation 1
        # x is the output of the forward convolution of y: its sizes are that convolution's
        assert [(h + 2 * p - r) // s + 1 for h, p, r, s in zip(y.shape[1:3], padding, w.shape[1:3], stride)] == list(x.shape[1:3])
        out = [(i - 1) * s - 2 * p + d * (r - 1) + 1 for i, s, p, d, r in zip(x.shape[1:3], stride, padding, dilation, w.shape[1:3])]
        extra = [o - e for o, e in zip(y.shape[1:3], out)]
        y.copy_(torch.nn.functional.conv_transpose2d(x.movedim(-1, 1), w.movedim(-1, 1), None, stride, padding, extra,
                                                     1, dilation).movedim(1, -1))


def _lw_cutlass_conv(name):
    return _StandInDgrad if "dgrad" in name else _StandIn
'''


def on_cpu(source: str) -> str:
    assert _LOADER.search(source), "the file's CUTLASS loader"
    return _LOADER.sub(lambda _: _STAND_IN, source)


def test_the_cutlass_form_runs_the_convolution_in_cutlass_and_the_epilogue_in_its_read_back(tmp_path, monkeypatch):
    from loopwise.kernels.check import scan

    rec, problem = conv_record(tmp_path, (2, 18, 11, 13), 10, 3, stride=2, padding=1)  # 18 -> 20, 10 -> 12 channels
    source = render_seed(rec, problem, {"conv": 2})
    assert parse_note(source)["conv"] == 2
    assert "extern_kernels.convolution(" not in source and "triton_poi_fused_convolution_relu_0.run(" not in source
    assert "extern_kernels.convolution into buf0 -> CUTLASS implicit-GEMM convolution (3xTF32, 128x64 tiles) with " \
           "triton_poi_fused_convolution_relu_0 as its epilogue" in source
    assert '"lw_conv2d_128x64_fp32": r"""' in source and "cutlass::arch::OpMultiplyAddFastF32" in source
    assert "IteratorAlgorithm::kOptimized>" in source and "kFewChannels" not in source
    assert "_lw_channels_last(_lw_cutlass_conv(\"lw_conv2d_128x64_fp32\").lw_conv, x, w, (2, 2), (1, 1), (1, 1))" in source
    assert [r.code for r in scan(source) if r.severity == "error"] == []
    judged(problem, on_cpu(source), "seed-conv-cutlass", tmp_path, monkeypatch)
    relaxed = render_seed(rec, problem, {"conv": 2}, precision="relaxed")
    assert "lw_conv2d_128x64_relaxed" in relaxed and "cutlass::arch::OpMultiplyAdd," in relaxed


@pytest.mark.parametrize("case", [
    dict(x=(2, 4, 9), co=12, k=3, stride=2, padding=2, dilation=2),  # 1-d, as 2-d of height one
    dict(x=(1, 8, 5, 7, 6), co=10, k=(3, 1, 2), padding=(1, 0, 1)),  # 3-d
    dict(x=(2, 6, 8, 8), co=16, k=3, padding=1, channels_last=True),  # Inductor's channels-last output
    dict(x=(2, 3, 9, 9), co=7, k=3, padding=1, returned=True),  # unfused: the pointwise kernel stays
    dict(x=(2, 5, 12, 12), co=7, k=3, padding=1, library_bias=True),  # a lone convolution, its bias in the read-back
])
def test_the_cutlass_form_is_judged_correct_on_other_ranks_layouts_and_uses(case, tmp_path, monkeypatch):
    rec, problem = conv_record(tmp_path, **case)
    source = render_seed(rec, problem, {"conv": 2, "gemm_tile": 1})
    few = len(case["x"]) < 5  # at most 8 input channels: 1-d and 2-d ones take the few-channel iterators
    assert f"CUTLASS implicit-GEMM convolution (3xTF32, 256x64 tiles{', few-channel iterators' if few else ''})" in source
    assert f"lw_conv{3 if len(case['x']) == 5 else 2}d{'_few' if few else ''}_256x64_fp32" in source
    judged(problem, on_cpu(source), "seed-conv-cutlass", tmp_path, monkeypatch)


@pytest.mark.parametrize("x,few", [
    ((2, 3, 17, 19), True),  # an image's 3 channels, padded to 4
    ((2, 8, 9, 9), True),  # 8: half of each optimized step would be zeros
    ((2, 9, 9, 9), False),  # 9, padded to 12: a quarter would be, left to the optimized iterators
    ((2, 5, 33), True),  # 1-d, as 2-d of height one
    ((1, 3, 5, 6, 7), False),  # 3-d: CUTLASS has no few-channel 3-d iterators
])
def test_a_convolution_of_few_input_channels_runs_through_cutlass_few_channel_iterators(x, few, tmp_path, monkeypatch):
    rec, problem = conv_record(tmp_path, x, 9, 3, padding=1)
    (site,) = find_sites(rec)
    source = render_seed(rec, problem, {"conv": 2})
    assert ("IteratorAlgorithm::kFewChannels>" in source) is few
    assert ("IteratorAlgorithm::kOptimized>" in source) is not few
    assert (f'"lw_conv{len(x) - 2 if len(x) == 5 else 2}d_few_128x64_fp32": r"""' in source) is few
    assert ("128x64 tiles, few-channel iterators)" in source) is few
    judged(problem, on_cpu(source), "seed-conv-few", tmp_path, monkeypatch)


@pytest.mark.parametrize("case", [
    dict(x=(2, 6, 9, 11), co=10, k=(3, 4), padding=(1, 2)),  # 2-d, the bias and ReLU fused into the read-back
    dict(x=(2, 5, 17), co=7, k=5, padding=2, dilation=2),  # 1-d, dilated
    dict(x=(1, 3, 4, 5, 6), co=9, k=(3, 2, 3), padding=(1, 0, 2), dilation=(1, 2, 1)),  # 3-d
    dict(x=(2, 6, 8, 8), co=16, k=3, padding=1, channels_last=True),  # Inductor's channels-last output
    dict(x=(2, 5, 12, 12), co=7, k=3, library_bias=True),  # a lone one, its bias in the read-back
])
def test_a_transposed_convolution_of_stride_one_runs_in_cutlass_as_the_forward_one_it_equals(case, tmp_path, monkeypatch):
    rec, problem = conv_record(tmp_path, **case, transposed=True)
    (site,) = find_sites(rec)
    assert site.conv["transposed"] and not cutlass_unfit(site)
    source = render_seed(rec, problem, {"conv": 2})
    assert "extern_kernels.convolution(" not in source and "CUTLASS implicit-GEMM convolution" in source
    assert ', "flip", ' in source and '"lw_conv' in source and "lw_dgrad" not in source
    few = ", few-channel iterators" if len(case["x"]) < 5 else ""  # the forward one's input channels: 3 to 6
    assert f"128x64 tiles{few}, transposed: the forward convolution it equals)" in source
    judged(problem, on_cpu(source), "seed-conv-transposed", tmp_path, monkeypatch)


@pytest.mark.parametrize("case", [
    dict(x=(2, 6, 7, 9), co=10, k=3, stride=2, padding=1, output_padding=1),  # 2-d, output padding, ReLU fused
    dict(x=(2, 5, 11), co=7, k=2, stride=3, padding=0),  # 1-d, stride past the window: some outputs get no tap
    dict(x=(2, 6, 7, 8), co=9, k=(4, 3), stride=(2, 1), padding=(1, 2), channels_last=True),  # channels-last
    dict(x=(2, 6, 9, 9), co=10, k=3, padding=3),  # stride 1, padded past the window: not the flip
    dict(x=(2, 5, 17), co=7, k=2, padding=2),  # 1-d, stride 1, padded past the window
    dict(x=(2, 6, 7, 8), co=9, k=(4, 5), stride=(3, 2), padding=(3, 4), output_padding=1),  # padded past it, strided
    dict(x=(2, 5, 6, 6), co=7, k=4, stride=2, padding=1, library_bias=True),  # a lone one, its bias in the read-back
])
def test_a_strided_transposed_convolution_runs_as_cutlass_data_gradient(case, tmp_path, monkeypatch):
    rec, problem = conv_record(tmp_path, **case, transposed=True)
    (site,) = find_sites(rec)
    assert not cutlass_unfit(site)
    source = render_seed(rec, problem, {"conv": 2})
    assert ', "dgrad", ' in source and '"lw_dgrad2d_128x64_fp32": r"""' in source
    assert "DefaultConv2dDgrad<" in source and "StrideSupport::kStrided" in source
    assert "128x64 tiles, transposed: the strided data gradient)" in source
    judged(problem, on_cpu(source), "seed-conv-dgrad", tmp_path, monkeypatch)
    for tile, name in ((1, "64x128"), (2, "64x64")):  # the data gradient's own tiles
        assert f'"lw_dgrad2d_{name}_fp32": r"""' in render_seed(rec, problem, {"conv": 2, "gemm_tile": tile})


@pytest.mark.parametrize("case", [
    dict(x=(2, 6, 3, 4, 5), co=10, k=3, stride=2, padding=1, output_padding=1),  # output padding, ReLU fused
    dict(x=(1, 5, 4, 3, 5), co=7, k=(4, 3, 3), stride=(2, 1, 3), padding=(1, 1, 0), channels_last=True),  # mixed
    dict(x=(2, 4, 3, 3, 2), co=6, k=5, stride=2, padding=2, library_bias=True),  # a lone one, its bias in the read-back
    dict(x=(1, 3, 1, 2, 1), co=5, k=(2, 3, 2), stride=2, padding=(0, 1, 0)),  # one input pixel deep
])
def test_a_strided_3d_transposed_convolution_runs_as_one_forward_convolution_per_stride_phase(case, tmp_path,
                                                                                               monkeypatch):
    rec, problem = conv_record(tmp_path, **case, transposed=True)
    (site,) = find_sites(rec)
    assert not cutlass_unfit(site) and transposed_mode(site) == "phases"
    source = render_seed(rec, problem, {"conv": 2})
    assert ', "phases", ' in source and '"lw_conv3d_128x64_fp32": r"""' in source and "lw_dgrad" not in source
    assert "128x64 tiles, transposed: a forward convolution per stride phase)" in source
    judged(problem, on_cpu(source), "seed-conv-phases", tmp_path, monkeypatch)


def test_every_stride_phase_of_a_transposed_convolution_is_the_forward_one_torch_agrees_with():
    """The phases against torch's transposed convolution in float64 over random strides, windows,
    paddings and output paddings, every phase's forward convolution computed as CUTLASS does it
    (the output's sizes given, zeros read past the input's end)."""
    import random

    import torch
    import torch.nn.functional as F

    from loopwise.kernels.expert.cutlass_conv import channels_last_conv
    from loopwise.kernels.expert.cutlass_conv import transposed_mode as mode

    stand_in: dict = {"torch": torch}
    exec(_STAND_IN, stand_in)  # noqa: S102 - the stand-in above
    rng, tried = random.Random(7), 0
    while tried < 60:
        stride = tuple(rng.choice((1, 2, 3)) for _ in range(3))
        window = tuple(rng.randint(1, 5) for _ in range(3))
        padding = tuple(rng.randint(0, r - 1) for r in window)
        extra = tuple(rng.randint(0, s - 1) for s in stride)
        spatial = tuple(rng.randint(1, 5) for _ in range(3))
        if mode(stride, padding, (1, 1, 1), window, extra) != "phases" or \
                any((i - 1) * s - 2 * p + r + e < 1 for i, s, p, r, e in zip(spatial, stride, padding, window, extra)):
            continue
        tried += 1
        c, k = rng.randint(1, 6), rng.randint(1, 6)
        x = torch.randn(2, c, *spatial, dtype=torch.float64)
        w = torch.randn(c, k, *window, dtype=torch.float64)
        b = torch.randn(k, dtype=torch.float64)
        want = F.conv_transpose3d(x, w, b, stride, padding, extra)
        got = channels_last_conv(stand_in["_StandIn"].lw_conv, x, w, b, stride, padding, (1, 1, 1), "phases", extra)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-10), (stride, window, padding, extra)


def test_transposed_convolutions_the_cutlass_form_cannot_run_and_the_triton_form_stay_the_librarys(tmp_path):
    rec, problem = conv_record(tmp_path, (2, 6, 9, 9), 10, 3, padding=1, transposed=True)
    with pytest.raises(Unsupported, match="no library convolution to replace"):
        render_seed(rec, problem, {"conv": 1})  # the Triton gather is written for forward convolutions
    dilated, _ = conv_record(tmp_path, (2, 6, 9, 9), 10, 3, stride=2, padding=1, dilation=2, transposed=True)
    assert "of stride (2, 2), padding (1, 1), dilation (2, 2)" in cutlass_unfit(find_sites(dilated)[0])
    wide, _ = conv_record(tmp_path, (2, 6, 9, 9), 10, 3, padding=5, dilation=2, transposed=True)  # neither form
    assert "padding (5, 5), dilation (2, 2)" in cutlass_unfit(find_sites(wide)[0])
    deep, _ = conv_record(tmp_path, (1, 4, 5, 5, 5), 8, 2, stride=3, transposed=True)  # a phase no tap reaches
    assert "of stride (3, 3, 3)," in cutlass_unfit(find_sites(deep)[0])
    deep, _ = conv_record(tmp_path, (1, 4, 5, 5, 5), 8, 3, stride=2, padding=2, transposed=True)  # padded past a phase
    assert "of stride (2, 2, 2), padding (2, 2, 2)," in cutlass_unfit(find_sites(deep)[0])
    grouped, _ = conv_record(tmp_path, (2, 8, 9, 9), 12, 3, padding=1, groups=4, transposed=True)
    assert "4 groups" in cutlass_unfit(find_sites(grouped)[0])
    strided, _ = conv_record(tmp_path, (2, 6, 9, 9), 10, 3, stride=2, padding=1, transposed=True)
    (site,) = find_sites(strided)
    assert site.k == 6 * 9 // 4  # a stride-2 output element sums over a quarter of input channels x window


def test_convolutions_cutlass_cannot_run_stay_the_librarys_under_its_form(tmp_path):
    grouped, problem = conv_record(tmp_path, (2, 8, 9, 9), 12, 3, padding=1, groups=4)
    with pytest.raises(Unsupported, match="no library convolution to replace .* that CUTLASS runs"):
        render_seed(grouped, problem, {"conv": 2})
    assert "extern_kernels.convolution into buf0 -> Triton" in render_seed(grouped, problem, {"conv": 1})
    long, problem = conv_record(tmp_path, (2, 4, 80), 8, 33)  # a window longer than the iterators' masks
    assert "window of (33,)" in cutlass_unfit(find_sites(long)[0])
    half, problem = conv_record(tmp_path, (2, 8, 9, 9), 12, 3)
    half = dataclasses.replace(half, module=half.module.replace("torch.float32", "torch.float16"))
    assert "float16" in cutlass_unfit(find_sites(half)[0])


@pytest.mark.slow
@pytest.mark.parametrize("dims,config,dgrad,few", [
    (2, "128x64", False, False), (2, "256x64", False, False), (2, "64x64", False, False), (3, "128x64", False, False),
    (3, "64x64", False, False), (2, "128x64", True, False), (2, "64x128", True, False), (2, "64x64", True, False),
    (2, "128x64", False, True), (2, "64x64", False, True)])
def test_cutlass_convolutions_compile_for_hopper_without_spilling(dims, config, dgrad, few, tmp_path):
    """Each tile of the CUTLASS form, 3xTF32, forward (2-d also through the few-channel iterators)
    and (2-d) data gradient, compiled by nvcc for sm_90a (where nvcc, the CUTLASS headers and
    torch's headers are here): no register spilled."""
    import shutil
    import subprocess
    import sysconfig

    import torch.utils.cpp_extension as ext

    from loopwise.kernels.backends import cutlass_include_dirs
    from loopwise.kernels.expert.cutlass_conv import extension_source

    if shutil.which("nvcc") is None or not cutlass_include_dirs():
        pytest.skip("needs nvcc and the nvidia-cutlass wheel")
    (tmp_path / "c10" / "cuda" / "impl").mkdir(parents=True)  # generated at torch's build, absent from a CPU build
    (tmp_path / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text("#pragma once\n")
    (tmp_path / "conv.cu").write_text(extension_source(dims, config, dgrad=dgrad, few=few))
    includes = [str(tmp_path), *cutlass_include_dirs(), *ext.include_paths(), sysconfig.get_paths()["include"]]
    done = subprocess.run(["nvcc", "-std=c++17", "--expt-relaxed-constexpr", "-O3", "-DNDEBUG",
                           "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-c", "conv.cu", "-o", "conv.o",
                           "-DTORCH_EXTENSION_NAME=conv", *[f"-I{d}" for d in includes]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    kernels = re.findall(r"(\d+) bytes spill stores", done.stderr)
    assert kernels and all(v == "0" for v in kernels), done.stderr[-3000:]


def test_the_cutlass_forms_pick_convolutions_one_by_one(tmp_path, monkeypatch):
    """In a record with a convolution that pays and one that does not (8 input channels), value 3
    replaces the first only (the other stays cuDNN's) and value 2 both; a grouped one neither."""
    from loopwise.kernels.expert.inductor import gemm
    from loopwise.kernels.expert.inductor.standalone import chosen_sites

    long, _ = conv_record(tmp_path, (16, 64, 56, 56), 128, 3, padding=1)
    short, _ = conv_record(tmp_path, (16, 8, 56, 56), 128, 3, padding=1)
    grouped, _ = conv_record(tmp_path, (16, 64, 56, 56), 128, 3, padding=1, groups=2)
    sites = [dataclasses.replace(find_sites(r)[0], out=f"buf{i}") for i, r in enumerate((short, long, grouped))]
    monkeypatch.setattr(gemm, "find_sites", lambda record: sites)
    picked = chosen_sites(long, {"conv": 3})
    assert [(s.out, s.index, s.cutlass) for s in picked] == [("buf1", 0, True)]
    assert [(s.out, s.index) for s in chosen_sites(long, {"conv": 2})] == [("buf0", 0), ("buf1", 1)]
    assert chosen_sites(long, {"conv": 3}, "relaxed") == []
    assert [s.out for s in chosen_sites(long, {"conv": 1})] == ["buf0", "buf1", "buf2"]


def test_the_seed_reads_its_parameters_from_their_modules_not_by_walking_paths_every_call(tmp_path):
    """ModelNew finds the submodules holding call()'s parameters once and reads each parameter from
    its module's own table on every call (``get_parameter`` walks the path: microseconds a
    parameter, and a network passes hundreds); a parameter replaced after the first call is the
    one the next call passes. (call() itself is replaced here: its kernels are judged elsewhere.)"""
    import importlib.util

    import torch

    rec, problem = conv_record(tmp_path, (2, 6, 11, 13), 10, 3, stride=2, padding=1)
    source = render_seed(rec, problem, {"conv": 1})
    forward = source[source.index("    def forward"):]
    assert "get_parameter(" not in forward and "holders[0]._parameters['weight']" in forward
    assert "self.get_submodule(path) for path in ['conv']" in forward
    path = tmp_path / "seed_holders.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("seed_holders", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    passed = []
    module.call = lambda args: passed.append(list(args)) or (args[0],)
    model = module.ModelNew()
    x = torch.randn(2, 6, 11, 13)
    model(x)
    assert passed[0][0] is x and passed[0][1] is model.conv.weight and passed[0][2] is model.conv.bias
    model.conv.weight = torch.nn.Parameter(torch.randn_like(model.conv.weight))
    model(x)
    assert passed[1][1] is model.conv.weight and passed[1][1] is not passed[0][1]


# The GPU test's convolutions: (problem fields, the tiles judged)
GPU_CASES = [
    # 2-d, 18 -> 20 input channels padded, the bias and ReLU fused into the read-back, each tile
    dict(dims=2, c=18, co=30, k=3, stride=2, padding=1, x=(3, 18, 37, 41), forward="torch.relu(self.conv(x))",
         tiles=(0, 1, 2)),
    # 1-d as 2-d of height one, its bias alone in the read-back
    dict(dims=1, c=16, co=24, k=5, stride=1, padding=2, x=(4, 16, 301), forward="self.conv(x)", tiles=(0,)),
    # 3-d, an odd output channel count, a scaling after it
    dict(dims=3, c=8, co=13, k=3, stride=1, padding=1, x=(2, 8, 6, 10, 12), forward="self.conv(x) * 0.5",
         tiles=(0,)),
    # 2-d transposed, stride 1: the forward convolution it equals, a tanh after it
    dict(dims="Transpose2", c=16, co=24, k=(3, 4), stride=1, padding=(1, 2), x=(2, 16, 33, 35),
         forward="torch.tanh(self.conv(x))", tiles=(0,)),
    # 2-d transposed, stride 2 with output padding: CUTLASS's strided data gradient, each of its tiles
    dict(dims="Transpose2", c=20, co=12, k=3, stride=2, padding=1, extra=", output_padding=1", x=(3, 20, 17, 23),
         forward="torch.relu(self.conv(x))", tiles=(0, 2)),
    # 1-d transposed, stride 3 past a window of 2: outputs no window position reaches are the bias
    dict(dims="Transpose1", c=8, co=6, k=2, stride=3, padding=0, x=(2, 8, 50), forward="self.conv(x)", tiles=(0,)),
    # 2-d transposed, stride 1 padded past its window (the data gradient at stride 1), 6 -> 8 channels, the two tiles
    # the stride-1 transposed case above does not judge (16 extensions in all: one build wave on the device's 16 cores)
    dict(dims="Transpose2", c=6, co=10, k=3, stride=1, padding=3, x=(2, 6, 21, 19), forward="self.conv(x) - 1.0",
         tiles=(1, 2)),
    # 3-d transposed, stride 1: the 3-d forward convolution it equals
    dict(dims="Transpose3", c=8, co=12, k=3, stride=1, padding=1, x=(2, 8, 5, 9, 7), forward="torch.sigmoid(self.conv(x))",
         tiles=(0,)),
    # 2-d, an image's 3 input channels: CUTLASS's few-channel iterators, two tiles
    dict(dims=2, c=3, co=16, k=3, stride=1, padding=1, x=(2, 3, 33, 29), forward="torch.relu(self.conv(x))",
         tiles=(0, 2)),
    # 3-d transposed, stride 2 with output padding: one forward convolution per stride phase, each tile
    dict(dims="Transpose3", c=12, co=20, k=3, stride=2, padding=1, extra=", output_padding=1", x=(2, 12, 5, 8, 7),
         forward="torch.relu(self.conv(x))", tiles=(0, 2)),
]


@pytest.fixture(scope="module")
def cutlass_gpu_candidates(tmp_path_factory):
    """Each GPU case's problem and its CUTLASS-form sources (Inductor's record made on this GPU),
    every extension they load built at once, one CPU core each (one after another they take
    minutes apiece)."""
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.expert.inductor.seed import inductor_record

    folder = tmp_path_factory.mktemp("cutlass_gpu")
    made = []
    for i, case in enumerate(GPU_CASES):
        path = folder / f"conv{case['dims']}d_gpu_{i}.py"
        path.write_text(PROBLEM.format(dims=case["dims"], c=case["c"], co=case["co"], k=case["k"], stride=case["stride"],
                                       padding=case["padding"], dilation=1, groups=1, bias=case.get("extra", ""),
                                       forward=case["forward"], x=case["x"]))
        problem = load_problem(str(path))
        rec = inductor_record(problem, "cuda")
        made.append((problem, [(tile, render_seed(rec, problem, {"conv": 2, "gemm_tile": tile})) for tile in case["tiles"]]))
    with LocalJudge(made[0][0], EvalConfig(), device="cuda", log_dir=folder) as judge:
        judge.precompile([source for _, sources in made for _, source in sources])  # a failed build fails its verdict
    return made


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(GPU_CASES)))
def test_on_the_gpu_the_cutlass_form_is_built_and_judged_correct_beside_inductors_record(index, cutlass_gpu_candidates,
                                                                                        tmp_path):
    """The CUTLASS form of a convolution Inductor compiled on this GPU: the extension built by nvcc
    for the device, run by the judge on the device (every trial, the float64 bound, the decoy audit
    of its launches), correct with no rejection for each tile asked."""
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.evaluate.result import Status

    problem, sources = cutlass_gpu_candidates[index]
    with LocalJudge(problem, EvalConfig(), device="cuda", log_dir=tmp_path) as judge:
        for tile, source in sources:
            assert "extern_kernels.convolution(" not in source and "CUTLASS implicit-GEMM convolution" in source
            ev = judge.evaluate(source, f"seed-conv-cutlass-{tile}")
            assert ev.status is Status.CORRECT, (ev.summary(), ev.log[-1500:])
            assert not ev.rejections
