"""The convolution-epilogue detector: a convolution left to PyTorch, then one fused elementwise pass."""

from __future__ import annotations

from dataclasses import replace

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.capture.elementwise import chain, half_precision
from loopwise.kernels.expert.fx_graph import graph_inputs
from loopwise.kernels.expert.pattern import Pattern


def detect_conv_epilogue(gm, model, args) -> Pattern | None:
    """A forward that runs one convolution module on its first input and then only elementwise
    operations on the result (with the model's tensors that broadcast against it, and further
    inputs of the result's shape): the convolution stays in PyTorch (cuDNN), the operations after
    it become one fused pass. None when the forward is anything else."""
    import torch
    import torch.nn as nn

    if not args or not all(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args):
        return None
    placeholders = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) < 2 or calls[0].op != "call_module" or calls[0].args != (placeholders[0],) or calls[0].kwargs:
        return None
    conv = gm.get_submodule(calls[0].target)
    if not isinstance(conv, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                             nn.ConvTranspose3d)):
        return None
    if any(placeholders[0] in n.all_input_nodes for n in calls[1:]):
        raise ew.Unsupported("the input is read again after the convolution")
    with torch.no_grad():
        shape = tuple(conv(args[0]).shape)
    if any(tuple(a.shape) != shape for a in args[1:]):
        raise ew.Unsupported("inputs after the first do not have the convolution's output shape")
    exprs = {calls[0].name: "x0"} | {p.name: f"x{i}" for i, p in enumerate(placeholders) if i}
    fused = chain(gm, model, calls[1:], exprs, len(placeholders), shape)
    return replace(fused, ops=(type(conv).__name__.lower(),) + fused.ops, prologue=calls[0].target,
                   params=half_precision(gm, model, args, fused.operands))  # a half-precision tensor of the model

