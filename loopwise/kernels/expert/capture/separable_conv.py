"""The separable-convolution detector: a depthwise convolution followed by a pointwise one."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import graph_inputs, one_float_input, zero_padding
from loopwise.kernels.expert.pattern import Pattern


def detect_separable_conv(gm, model, args) -> Pattern | None:
    """A forward that is a depthwise nn.Conv2d (one filter per channel: groups = in = out channels)
    and then a pointwise one (1x1, stride 1, no padding, groups 1) on its output, on one float32
    NCHW input (MobileNet's separable convolution, KernelBench L1/86): one kernel computes the
    depthwise outputs of a tile in registers and multiplies them by the pointwise weights, so the
    intermediate never reaches memory. None when the forward is anything else."""
    import torch.nn as nn

    if not one_float_input(args, ndim=4):
        return None
    (x,) = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if (len(calls) != 2 or any(c.op != "call_module" or c.kwargs for c in calls)
            or calls[0].args != (x,) or calls[1].args != (calls[0],) or len(calls[0].users) != 1):
        return None
    depthwise, pointwise = (gm.get_submodule(c.target) for c in calls)
    if type(depthwise) is not nn.Conv2d or type(pointwise) is not nn.Conv2d:
        return None
    c = depthwise.in_channels
    if not (depthwise.groups == c == depthwise.out_channels and pointwise.groups == 1
            and tuple(pointwise.kernel_size) == (1, 1) and tuple(pointwise.stride) == (1, 1)
            and tuple(pointwise.padding) == (0, 0) and pointwise.in_channels == c):
        return None
    if not (zero_padding(depthwise) and zero_padding(pointwise)):
        raise ew.Unsupported("a separable convolution with padding given by name or not zeros (the fused "
                             "template takes zero padding given as numbers)")
    paths = [call.target for call in calls]
    operands = tuple(f"{path}.{name}" for path, m in zip(paths, (depthwise, pointwise))
                     for name in ("weight", "bias") if getattr(m, name) is not None)
    return Pattern("separable_conv", inputs=1, ops=("conv2d_depthwise", "conv2d_pointwise"), operands=operands,
                   params=(("depthwise", paths[0]), ("pointwise", paths[1]), ("kh", depthwise.kernel_size[0]),
                           ("kw", depthwise.kernel_size[1]), ("stride", tuple(depthwise.stride)),
                           ("padding", tuple(depthwise.padding)), ("dilation", tuple(depthwise.dilation)),
                           ("depthwise_bias", depthwise.bias is not None), ("pointwise_bias", pointwise.bias is not None),
                           ("in_channels", c), ("out_channels", pointwise.out_channels)))

