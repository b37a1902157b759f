"""The convolution detector: one convolution module on the forward's one input (an implicit GEMM)."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import graph_inputs, one_float_input, zero_padding
from loopwise.kernels.expert.pattern import Pattern


def detect_conv(gm, model, args) -> Pattern | None:
    """A forward that is one nn.Conv1d, nn.Conv2d, nn.Conv3d (groups 1) or nn.ConvTranspose1d / 2d / 3d
    (any groups: param ``groups`` where more than one), zero padding given as numbers, on its one float32 input: an implicit GEMM (a Conv1d through
    the 2-D one, its input and weights viewed with a height of one, ``dims`` 1). None when the
    forward is anything else."""
    import torch.nn as nn

    if not any(one_float_input(args, ndim=ndim) for ndim in (3, 4, 5)):
        return None
    (x,) = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_module" or calls[0].args != (x,) or calls[0].kwargs:
        return None
    conv = gm.get_submodule(calls[0].target)
    kind = {nn.Conv1d: "conv2d", nn.Conv2d: "conv2d", nn.Conv3d: "conv3d", nn.ConvTranspose1d: "conv_transpose",
            nn.ConvTranspose2d: "conv_transpose", nn.ConvTranspose3d: "conv_transpose"}.get(type(conv))
    if kind is None or args[0].dim() != len(conv.kernel_size) + 2:
        return None
    if (conv.groups != 1 and kind != "conv_transpose") or not zero_padding(conv):
        raise ew.Unsupported(f"{type(conv).__name__} with groups={conv.groups}, padding {conv.padding!r}, "
                             f"padding_mode {conv.padding_mode!r} (the implicit GEMM takes groups 1 but for a transposed convolution, and zero padding)")
    path = calls[0].target
    operands = (f"{path}.weight",) + ((f"{path}.bias",) if conv.bias is not None else ())
    if kind == "conv_transpose":
        return Pattern(kind, inputs=1, ops=(type(conv).__name__.lower(),), operands=operands,
                       params=(("conv", path), ("module", type(conv).__name__), ("kernel", tuple(conv.kernel_size)),
                               ("stride", tuple(conv.stride)), ("padding", tuple(conv.padding)),
                               ("output_padding", tuple(conv.output_padding)), ("dilation", tuple(conv.dilation)),
                               ("has_bias", conv.bias is not None), ("in_channels", conv.in_channels),
                               ("out_channels", conv.out_channels),
                               *((("groups", conv.groups),) if conv.groups != 1 else ())))
    window = (("kd", "kh", "kw") if kind == "conv3d" else ("kh", "kw"))
    extra = (("out_channels", conv.out_channels),) if kind == "conv3d" else ()
    if isinstance(conv, nn.Conv1d):  # a 2-D convolution of height one: the window, stride, padding and dilation 1, 1, 0, 1
        return Pattern(kind, inputs=1, ops=("conv1d",), operands=operands,
                       params=(("conv", path), ("kh", 1), ("kw", conv.kernel_size[0]), ("stride", (1, conv.stride[0])),
                               ("padding", (0, conv.padding[0])), ("dilation", (1, conv.dilation[0])),
                               ("has_bias", conv.bias is not None), ("in_channels", conv.in_channels), ("dims", 1)))
    return Pattern(kind, inputs=1, ops=(kind,), operands=operands,
                   params=(("conv", path), *zip(window, conv.kernel_size), ("stride", tuple(conv.stride)),
                           ("padding", tuple(conv.padding)), ("dilation", tuple(conv.dilation)),
                           ("has_bias", conv.bias is not None), ("in_channels", conv.in_channels), *extra))

