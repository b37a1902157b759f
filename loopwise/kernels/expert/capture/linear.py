"""The linear-layer detector: one nn.Linear with an elementwise epilogue (a GEMM with its epilogue fused)."""

from __future__ import annotations

import functools

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.expressions import expression
from loopwise.kernels.expert.fx_graph import graph_inputs, one_float_input
from loopwise.kernels.expert.pattern import Pattern


def detect_linear_epilogue(gm, model, args) -> Pattern | None:
    """A model whose forward is one nn.Linear on its 2-D float32 input followed by elementwise
    operations on the product (constants, and model tensors of one value per output column): a GEMM
    with its epilogue fused. None when the forward is anything else."""
    import torch
    import torch.nn as nn

    if not one_float_input(args, ndim=2):
        return None
    (x,) = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if not calls or calls[0].op != "call_module" or calls[0].args[:1] != (x,):
        return None
    linear = gm.get_submodule(calls[0].target)
    if not isinstance(linear, nn.Linear) or linear.in_features != args[0].shape[1]:
        return None
    n = linear.out_features
    operands = [f"{calls[0].target}.weight"] + ([f"{calls[0].target}.bias"] if linear.bias is not None else [])
    exprs = {calls[0].name: "acc"}
    ops, body = ["linear"], []
    for node in calls[1:]:
        if node.op == "get_attr":
            value = functools.reduce(getattr, node.target.split("."), model)
            if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.numel() != n \
                    or tuple(value.shape)[-1:] != (n,):
                raise ew.Unsupported(f"model tensor {node.target!r} is not one float32 value per output column")
            if node.target not in operands:
                operands.append(node.target)
            exprs[node.name] = f"p{operands.index(node.target)}"
            continue
        if any(hasattr(a, "name") and a.name not in exprs for a in node.args):
            raise ew.Unsupported("an operation after the linear layer reads something other than its result")
        expr, op = expression(gm, node, exprs)
        exprs[node.name] = f"t{len(body)}"
        body.append(f"{exprs[node.name]} = {expr}  # {op}")
        ops.append(op)
    (out,) = [nd for nd in gm.graph.nodes if nd.op == "output"]
    if not hasattr(out.args[0], "name") or out.args[0].name not in exprs:
        return None
    return Pattern("linear", inputs=1, expr=exprs[out.args[0].name], ops=tuple(ops), body=tuple(body),
                   operands=tuple(operands), params=(("n", n), ("k", linear.in_features),
                                                     ("has_bias", linear.bias is not None)))

