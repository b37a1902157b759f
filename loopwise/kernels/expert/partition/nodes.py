"""What the partitioner reads off shape-propagated FX nodes, and the Triton statements of a cone of them."""

from __future__ import annotations

import functools

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.expressions import expression


def operand_shapes(model, ps) -> list[tuple]:
    """The shapes of the tensors a pass reads broadcast: the model's (get_attr nodes ``ps``), or
    values of the forward (see :func:`model_tensors`)."""
    return [tuple(functools.reduce(getattr, p.target.split("."), model).shape) if p.op == "get_attr"
            else tuple(p.meta["tensor_meta"].shape) for p in ps]


def operand_dtypes(model, ps) -> list[str]:
    """The dtypes (``float16``) of the tensors ``ps`` a pass reads broadcast (see :func:`operand_shapes`)."""
    return [str(functools.reduce(getattr, p.target.split("."), model).dtype).removeprefix("torch.")
            if p.op == "get_attr" else dtype_name(p) for p in ps]


def model_tensors(ps) -> bool:
    """Whether the tensors ``ps`` a pass reads broadcast are all the model's (get_attr nodes): a
    pass that also reads a smaller value of the forward broadcast (a per-row statistic) is no GEMM's
    or norm's prologue or epilogue, whose launchers read the model's tensors by their paths."""
    return all(p.op == "get_attr" for p in ps)


def broadcasts(arg, shape) -> bool:
    """Whether the float value ``arg`` (an FX node) has fewer elements than ``shape`` and broadcasts
    against it the one way a pass indexes a model tensor, as one contiguous run of dimensions (a
    per-row statistic ``(N, 1)`` against ``(N, D)``)."""
    import math

    small = float_shape(arg)
    if small is None or math.prod(small) >= math.prod(shape):
        return False
    return ew.broadcast_run(tuple(shape), small) is not None


# An fp32 value ``t`` rounded to the nearest fp16 / bf16 (ties to even), as PyTorch stores it. bf16 by
# its bits, as c10::BFloat16 rounds: Triton's interpreter truncates a cast from fp32 to bf16.
_BITS = "{t}.to(tl.uint32, bitcast=True)"
ROUNDED = {
    "float16": "{t} = {t}.to(tl.float16).to(tl.float32)  # rounded to float16",
    "bfloat16": ("{t} = tl.where({t} != {t}, {t}, ((" + _BITS + " + 0x7FFF + ((" + _BITS + " >> 16) & 1)) & 0xFFFF0000)"
                 ".to(tl.float32, bitcast=True))  # rounded to bfloat16"),
}


def statements(gm, nodes, exprs: dict, out, rounded: bool = False) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """One Triton statement per node of ``nodes`` (in graph order), its inputs named in ``exprs``:
    (statements, operation names, the expression of ``out``). The arithmetic is fp32; ``rounded``:
    each fp16 / bf16 node's result is rounded to its dtype, the value PyTorch stores."""
    exprs, body, ops = dict(exprs), [], []
    for node in nodes:
        expr, op = expression(gm, node, exprs)
        exprs[node.name] = f"t{len(body)}"
        body.append(f"{exprs[node.name]} = {expr}  # {op}")
        if rounded and dtype_name(node) in ROUNDED:
            body.append(ROUNDED[dtype_name(node)].format(t=exprs[node.name]))
        ops.append(op)
    return tuple(body), tuple(ops), exprs[out.name]


def float32_shape(node):
    """The node's output shape when it is one float32 tensor, else None."""
    shape = float_shape(node)
    return shape if shape is not None and dtype_name(node) == "float32" else None


def float_shape(node):
    """The node's output shape when it is one float32, float16 or bfloat16 tensor (what a fused pass
    reads and writes, in fp32 arithmetic), else None."""
    meta = node.meta.get("tensor_meta")
    if meta is None or not hasattr(meta, "dtype") or meta.dtype not in ew.FLOAT_DTYPES:
        return None
    return tuple(meta.shape)


def dtype_name(node) -> str:
    """The dtype of the node's output tensor, as torch names it without the prefix (``float16``)."""
    return str(node.meta["tensor_meta"].dtype).removeprefix("torch.")


def arg_nodes(node) -> list:
    import torch.fx as fx

    found: list = []
    fx.node.map_arg((node.args, node.kwargs), lambda n: found.append(n) or n)
    return found


def read_elsewhere(node, outputs, i) -> bool:
    """Whether a pass other than ``outputs[i]`` reads ``node``: one that computes again part of the
    work of pass i (a value both use) reads its input, so ``node`` must still be stored. Pass i as
    the epilogue of the part computing ``node`` would leave ``node`` to PyTorch, computed twice."""
    return any(j != i and (node in xs or node in ps) for j, (_, xs, ps, _) in enumerate(outputs))
