"""Attention parts of a partitioned forward: each ``F.scaled_dot_product_attention(q, k, v)`` whose
operands the flash-style kernel reads (templates/_attention.j2) becomes one Triton part of the
``graph_norm`` plan (kind ``attention`` of :class:`~.records.Norm`), the score matrix never in
memory; the work around it stays the plan's other parts.

The call is taken as PyTorch defines it: scores ``q @ k^T * scale`` (``scale`` 1 / sqrt of the head
dimension unless given as a number), a causal mask when ``is_causal`` is True (query i sees keys
0..i, the top-left diagonal), an ``attn_mask`` (a tensor broadcast to the scores: boolean, a key
taking part where it is True, or of the inputs' dtype, added to the scores), softmax over the keys
(a query no key takes part for gets zeros, as PyTorch gives), times v. A call with dropout
(``dropout_p`` other than 0), grouped heads, a flag or scale computed in forward, batch dimensions
that differ between q, k and v (broadcast), mixed dtypes, a mask of another dtype or no keys stays
in PyTorch, as does one the flash kernel would make slower
(:func:`~..attention_plan.attention_recompute_reason`)."""

from __future__ import annotations

from loopwise.kernels.expert.attention_plan import attention_recompute_reason, attention_values
from loopwise.kernels.expert.fx_graph import call_arg, op_name
from loopwise.kernels.expert.partition.nodes import dtype_name, float_shape
from loopwise.kernels.expert.partition.records import AttentionOp, Norm
from loopwise.kernels.expert.pattern import Pattern


def attention_calls(gm) -> dict:
    """{node: its :class:`AttentionOp`} for each attention call of ``gm`` an attention part computes."""
    calls = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and op_name(node) == "scaled_dot_product_attention":
            found = _attention_op(node)
            if found is not None:
                calls[node] = found
    return calls


def attention_parts(calls: dict) -> list:
    """[(Norm of kind ``attention``, (the node it computes, [q, k, v] and its mask, if any))] for ``calls``."""
    parts = []
    for node, op in calls.items():
        xs = [*node.args[:3], *([call_arg(node, "attn_mask", 3)] if op.mask else [])]
        parts.append((Norm("", "attention", inputs=len(xs), operands=(), body=(), expr="x0",
                           ops=("scaled_dot_product_attention",), out_dtype=op.dtype, attention=op), (node, xs)))
    return parts


def _attention_op(node) -> AttentionOp | None:
    """The call's :class:`AttentionOp`, or None where the part does not compute it (see the module's docstring)."""
    if len(node.args) < 3 or not all(hasattr(a, "meta") for a in node.args[:3]):
        return None
    shapes = [float_shape(a) for a in node.args[:3]]
    if any(s is None or len(s) < 2 for s in shapes) or float_shape(node) is None:
        return None
    dtypes = {dtype_name(a) for a in (*node.args[:3], node)}
    if len(dtypes) != 1:
        return None
    (q, k, v), dtype = shapes, dtypes.pop()
    dropout = call_arg(node, "dropout_p", 4, 0.0)
    causal, scale = call_arg(node, "is_causal", 5, False), call_arg(node, "scale", 6)
    if (dropout not in (0, 0.0) or not isinstance(causal, bool) or node.kwargs.get("enable_gqa")
            or not (scale is None or isinstance(scale, (int, float)) and not isinstance(scale, bool))):
        return None
    if not (q[:-2] == k[:-2] == v[:-2]) or k[-1] != q[-1] or v[-2] != k[-2] or k[-2] == 0:
        return None
    mask = _mask_kind(call_arg(node, "attn_mask", 3), (*q[:-1], k[-2]), dtype)
    if mask is None or mask and causal:  # PyTorch refuses a mask with is_causal
        return None
    d = q[-1]
    pattern = Pattern("attention", inputs=3, params=(("sq", q[-2]), ("sk", k[-2]), ("d", d), ("dv", v[-1]),
                                                     ("causal", causal), ("dtype", dtype)))
    if attention_recompute_reason(pattern):
        return None
    sizes = attention_values(pattern, "fp32")
    return AttentionOp(causal, float(scale) if scale is not None else d ** -0.5, sizes["block_d"], sizes["block_dv"],
                       sizes["stages"], dtype, mask)


def _mask_kind(mask, scores: tuple, dtype: str) -> int | None:
    """0 for no mask, 1 for a boolean one, 2 for one of the inputs' float dtype (added to the
    scores), each broadcasting to the ``scores`` shape; None for any other."""
    import torch

    if mask is None:
        return 0
    meta = getattr(mask, "meta", {}).get("tensor_meta")
    if meta is None or not hasattr(meta, "dtype") or meta.dtype not in (torch.bool, getattr(torch, dtype)):
        return None
    try:
        if tuple(torch.broadcast_shapes(tuple(meta.shape), scores)) != scores:
            return None
    except RuntimeError:
        return None
    return 1 if meta.dtype == torch.bool else 2
