"""The pooling detector: one max or average pooling module on the forward's input."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import graph_inputs, one_float_input
from loopwise.kernels.expert.pattern import Pattern


def detect_pooling(gm, model, args) -> Pattern | None:
    """A forward that is one nn.MaxPool{1,2,3}d or nn.AvgPool{1,2,3}d module on its float32 input
    (no ceil mode, no indices returned, no divisor override). None when it is anything else."""
    import torch.nn as nn

    if not one_float_input(args):
        return None
    (x,) = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_module" or calls[0].args != (x,):
        return None
    pool = gm.get_submodule(calls[0].target)
    kinds = {nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3, nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3}
    ndim = kinds.get(type(pool))
    if ndim is None:
        return None
    is_max = isinstance(pool, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d))
    if pool.ceil_mode or (is_max and pool.return_indices) or getattr(pool, "divisor_override", None):
        raise ew.Unsupported(f"{type(pool).__name__} with ceil_mode, return_indices or divisor_override")
    if args[0].dim() not in (ndim + 1, ndim + 2):
        return None

    def triple(value, fill):
        value = tuple(value) if isinstance(value, (tuple, list)) else (value,) * ndim
        return (fill,) * (3 - ndim) + tuple(int(v) for v in value)

    kernel = triple(pool.kernel_size, 1)
    stride = triple(pool.stride if pool.stride not in (None, (), []) else pool.kernel_size, 1)
    padding, dilation = triple(pool.padding, 0), triple(pool.dilation if is_max else 1, 1)
    name = type(pool).__name__
    return Pattern("pool", inputs=1, ops=(name.lower(),),
                   params=(("module", name), ("ndim", ndim), ("is_max", is_max),
                           ("include_pad", bool(getattr(pool, "count_include_pad", True))),
                           ("kernel", kernel[3 - ndim:]), ("stride", stride[3 - ndim:]),
                           ("padding", padding[3 - ndim:]), ("dilation", dilation[3 - ndim:]),
                           ("kernel3", kernel), ("stride3", stride), ("padding3", padding), ("dilation3", dilation)))

