"""Depthwise convolutions of a partitioned forward: ``F.conv1d/2d/3d`` or nn.Conv1d/2d/3d with as
many groups as channels (each output channel computed from its own input channel) over a float
tensor, zero-padded by the call or by a ``F.pad`` before it (the causal convolution's left padding)
that only the convolution reads. Each becomes a pool part (:class:`~.records.PoolOp`, reduce
``conv``): the pad is folded into the window's index map, entries outside the input counting as
zeros. Other convolutions stay with the GEMM templates (``graph_conv``) or in PyTorch."""

from __future__ import annotations

from loopwise.kernels.expert.fx_graph import call_arg, op_name, zero_padding
from loopwise.kernels.expert.partition.nodes import float_shape
from loopwise.kernels.expert.partition.pools import per_dim
from loopwise.kernels.expert.partition.records import PoolOp

_DIMS = {"conv1d": 1, "conv2d": 2, "conv3d": 3}
_MODULES = {"Conv1d": "conv1d", "Conv2d": "conv2d", "Conv3d": "conv3d"}
_FUNCTION_HOMES = ("torch.nn.functional", "torch", "torch._C._nn", "torch._C._VariableFunctions", None)


def depthwise_calls(gm) -> dict:
    """{node: its :class:`PoolOp`} for each depthwise convolution of ``gm`` a pool part computes."""
    found = {}
    for node in gm.graph.nodes:
        conv = _conv(gm, node)
        if conv is not None:
            found[node] = conv
    return found


def folded_pad(gm, node):
    """The ``F.pad`` node a depthwise convolution ``node`` reads and folds into its window, or None."""
    src = node.args[0] if node.args else None
    return src if _zero_pad(src, _DIMS.get(_name(gm, node), 0)) is not None else None


def _name(gm, node) -> str:
    if node.op == "call_module":
        return _MODULES.get(type(gm.get_submodule(node.target)).__name__, "")
    if node.op != "call_function" or getattr(node.target, "__module__", "") not in _FUNCTION_HOMES:
        return ""
    return op_name(node) if op_name(node) in _DIMS else ""


def _conv(gm, node) -> PoolOp | None:
    """What ``node`` computes as a depthwise pool part, or None."""
    name = _name(gm, node)
    if not name or not node.args or not hasattr(node.args[0], "meta"):
        return None
    dims = _DIMS[name]
    given = _options(gm, node)
    shape = float_shape(node.args[0])
    if given is None or shape is None or len(shape) not in (dims + 1, dims + 2) or float_shape(node) is None:
        return None
    weight, bias, stride, padding, dilation, groups = given
    channels = shape[-dims - 1]
    if groups != channels or weight[1] != (channels, 1):
        return None
    kernel = weight[2]
    stride, padding, dilation = (per_dim(v, dims) for v in (stride, padding, dilation))
    if None in (stride, padding, dilation) or min(stride + dilation) < 1 or min(padding) < 0:
        return None
    before, after = padding, padding
    pad = _zero_pad(node.args[0], dims)
    if pad is not None:
        before = tuple(b + p for b, p in zip(before, pad[0]))
        after = tuple(a + p for a, p in zip(after, pad[1]))
    return PoolOp(name, "conv", kernel, stride, before, dilation, pad_after=after, weight=weight[0], bias=bias)


def _options(gm, node):
    """((weight path, (C_out, C_in per group), kernel), bias path, stride, padding, dilation, groups)
    of a convolution whose weights and bias are the model's tensors, or None."""
    if node.op == "call_module":
        sub = gm.get_submodule(node.target)
        if len(node.args) != 1 or node.kwargs or not zero_padding(sub):
            return None
        weight = (f"{node.target}.weight", tuple(sub.weight.shape[:2]), tuple(sub.weight.shape[2:]))
        bias = f"{node.target}.bias" if sub.bias is not None else ""
        return weight, bias, sub.stride, sub.padding, sub.dilation, sub.groups
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    given = dict(zip(names, node.args)) | dict(node.kwargs)
    w, b = given.get("weight"), given.get("bias")
    if set(given) - set(names) or getattr(w, "op", None) != "get_attr" or (b is not None and getattr(b, "op", None) != "get_attr"):
        return None
    shape = float_shape(w)
    if shape is None:
        return None
    weight = (w.target, tuple(shape[:2]), tuple(shape[2:]))
    return (weight, b.target if b is not None else "", given.get("stride", 1), given.get("padding", 0),
            given.get("dilation", 1), given.get("groups", 1))


def _zero_pad(node, dims: int):
    """((before, ...), (after, ...)) per convolved dimension of an ``F.pad`` node padding only the
    last ``dims`` dimensions with zeros by non-negative amounts and read by one node, else None."""
    if getattr(node, "op", None) != "call_function" or op_name(node) != "pad" or len(node.users) != 1 or not dims:
        return None
    pads, mode, value = call_arg(node, "pad", 1), call_arg(node, "mode", 2, "constant"), call_arg(node, "value", 3, None)
    if mode != "constant" or value not in (None, 0, 0.0) or not isinstance(pads, (tuple, list)) or len(pads) % 2 \
            or len(pads) > 2 * dims or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in pads):
        return None
    pads = list(pads) + [0] * (2 * dims - len(pads))  # (last before, last after, the one before it ...)
    before = tuple(pads[2 * (dims - 1 - d)] for d in range(dims))
    after = tuple(pads[2 * (dims - 1 - d) + 1] for d in range(dims))
    return before, after

