"""The row-softmax detector: one softmax or log-softmax over the last dimension."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import call_arg
from loopwise.kernels.expert.pattern import Pattern


def detect_row_softmax(gm, model, args) -> Pattern | None:
    """A forward that is one softmax or log-softmax (function, method or module) over the last
    dimension of its float32, float16 or bfloat16 input (no ``dtype`` argument). None when the
    forward is anything else.

    Raises:
        ew.Unsupported: the one softmax is over another dimension.
    """
    import torch

    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(nodes) == 1 and softmax_dim(gm, nodes[0]) is not None and tensors[0].dtype in ew.FLOAT_DTYPES \
            and nodes[0].kwargs.get("dtype") is None and len(nodes[0].args) <= 2:
        dim, log = softmax_dim(gm, nodes[0]), is_log_softmax(gm, nodes[0])
        name = "log_softmax" if log else "softmax"
        if dim in (-1, tensors[0].dim() - 1):
            # fp16 / bf16 rows are read upcast: max, sum and exponentials in fp32, as PyTorch computes them
            half = (("upcast", True),) if tensors[0].dtype != torch.float32 else ()
            return Pattern("row_softmax", inputs=1, ops=(name,), params=(("log", log), *half))
        raise ew.Unsupported(f"{name} over dim {dim}, not the last")
    return None


def softmax_dim(gm, node):
    """The dim of a softmax or log-softmax node (function, method or module), else None."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if node.op == "call_function" and node.target in (torch.softmax, F.softmax, torch.log_softmax, F.log_softmax):
        return call_arg(node, "dim", 1)
    if node.op == "call_method" and node.target in ("softmax", "log_softmax"):
        return call_arg(node, "dim", 1)
    if node.op == "call_module" and isinstance(gm.get_submodule(node.target), (nn.Softmax, nn.LogSoftmax)):
        return gm.get_submodule(node.target).dim
    return None


def is_log_softmax(gm, node) -> bool:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if node.op == "call_module":
        return isinstance(gm.get_submodule(node.target), nn.LogSoftmax)
    return node.target in (torch.log_softmax, F.log_softmax, "log_softmax")

