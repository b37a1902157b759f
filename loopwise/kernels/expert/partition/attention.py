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
in PyTorch. One the flash kernel would make slower
(:func:`~..attention_plan.attention_recompute_reason`) is no flash part: it is split into a
matmul, a softmax and a matmul part instead (:func:`split_call`, :mod:`.split_attention`).

Attention written out (:func:`explicit_attention`): ``softmax(q @ k^T [* c | / c] [masked_fill(m,
-inf) | + m]) [dropout of p 0] @ v``, the softmax over the keys, each intermediate read by the next
step alone, is that call with ``scale=c`` (1 when no scale is written) and the mask inverted
(``logical_not(m)``) or added, so a part computes it as well. Written out, a query whose keys are
all masked gets NaN (softmax of a row of -inf), where PyTorch's call gives zeros: the part keeps
the NaN (:attr:`AttentionOp.empty_nan`), so it computes what the reference wrote. A chain is
rewritten only where a part takes the call that results (the flash part, or the split's parts,
which keep the NaN too: :attr:`~.records.RowOp.safe` off); any other stays as written."""

from __future__ import annotations

import math
from dataclasses import replace

from loopwise.kernels.expert.attention_plan import attention_recompute_reason, attention_values
from loopwise.kernels.expert.fx_graph import call_arg, op_name
from loopwise.kernels.expert.partition.nodes import dtype_name, float_shape
from loopwise.kernels.expert.partition.records import AttentionOp, Norm
from loopwise.kernels.expert.pattern import Pattern


# node.meta key: the attention call stands for attention written out (a softmax of a row of -inf is NaN)
EMPTY_NAN = "loopwise_attention_empty_nan"


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
    """The call's :class:`AttentionOp`, or None where the flash part does not compute it (see the module's docstring)."""
    call = _call(node)
    if call is None or attention_recompute_reason(call[0]):
        return None
    pattern, op = call
    sizes = attention_values(pattern, "fp32")
    return replace(op, block_d=sizes["block_d"], block_dv=sizes["block_dv"], stages=sizes["stages"])


SPLIT_ENTRIES = 65535  # a split attention's products: one program row per (batch, head) entry, the grid's second axis


def split_call(node) -> AttentionOp | None:
    """What the call computes (an :class:`AttentionOp` without tiles) where the flash part refuses
    it as slower (:func:`~..attention_plan.attention_recompute_reason`) and its matmul, softmax and
    matmul parts (:mod:`.split_attention`) compute it instead; else None."""
    call = _call(node)
    if call is None or not attention_recompute_reason(call[0]):
        return None
    q = float_shape(node.args[0])
    return call[1] if math.prod(q[:-2]) <= SPLIT_ENTRIES else None


def _call(node) -> tuple[Pattern, AttentionOp] | None:
    """(the attention pattern that :func:`attention_recompute_reason` reads, the call's
    :class:`AttentionOp` without tiles) where a part can compute the call (see the module's
    docstring), else None."""
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
    return pattern, AttentionOp(causal, float(scale) if scale is not None else d ** -0.5, 0, 0, 0, dtype, mask,
                                bool(node.meta.get(EMPTY_NAN)))


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


def explicit_attention(gm) -> int:
    """Rewrites each attention ``gm`` writes out (see the module's docstring) as the
    ``F.scaled_dot_product_attention`` call it equals, where an attention part takes that call;
    the number rewritten. Shapes (``tensor_meta``) must have been propagated."""
    import torch
    import torch.nn.functional as F

    graph, done = gm.graph, 0
    for y in list(graph.nodes):
        chain = _explicit_chain(gm, y)
        if chain is None:
            continue
        (q, k, v, scale, mask, added), interior = chain
        with graph.inserting_before(y):
            keep = None
            if mask is not None and not added:  # masked_fill's True drops a key; SDPA's True keeps it
                keep = graph.call_function(torch.logical_not, (mask,))
                keep.meta["tensor_meta"] = mask.meta.get("tensor_meta")
            call = graph.call_function(F.scaled_dot_product_attention, (q, k, v),
                                       {"attn_mask": keep if keep is not None else mask, "scale": scale})
        call.meta.update({"tensor_meta": y.meta.get("tensor_meta"), EMPTY_NAN: True})
        if _attention_op(call) is None and split_call(call) is None:
            graph.erase_node(call)
            if keep is not None:
                graph.erase_node(keep)
            continue
        y.replace_all_uses_with(call)
        for node in [y, *interior]:  # users first
            if not node.users:
                graph.erase_node(node)
        done += 1
    if done:
        graph.lint()
        gm.recompile()
    return done


_MATMULS = ("matmul", "bmm", "__matmul__")


def _explicit_chain(gm, y):
    """((q, k, v, scale, mask node or None, whether the mask is added), [the chain's nodes from
    the weights back to k's transpose]) where ``y`` is ``softmax(scores) @ v`` as written out, else None."""
    if y.op not in ("call_function", "call_method") or op_name(y) not in _MATMULS or len(y.args) != 2 or y.kwargs:
        return None
    weights, v = y.args
    interior, node = [], weights
    while _identity(gm, node):  # dropout of p 0, nn.Identity
        interior.append(node)
        node = node.args[0]
    if not _last_dim_softmax(gm, node):
        return None
    interior.append(node)
    node, mask, added = node.args[0], None, False
    if op_name(node) == "masked_fill" and len(node.args) == 3 and not node.kwargs:
        fill = node.args[2]
        if not (isinstance(fill, float) and math.isinf(fill) and fill < 0) or not hasattr(node.args[1], "op"):
            return None
        interior.append(node)
        node, mask = node.args[0], node.args[1]
    elif op_name(node) in ("add", "__add__") and len(node.args) == 2 and not node.kwargs:
        first, second = node.args
        if not (hasattr(first, "op") and hasattr(second, "op")):
            return None
        interior.append(node)
        node, mask, added = (first, second, True) if _scaled_scores(first) is not None else (second, first, True)
    found = _scaled_scores(node)
    if found is None:
        return None
    scale, scaled, scores, kt = found
    interior += [*scaled, scores, kt]
    if any(len(n.users) != 1 for n in interior[:-1]):  # the transpose of k may have other readers
        return None
    q, k = scores.args[0], kt.args[0]
    if not all(hasattr(a, "op") for a in (q, k, v)):
        return None
    return (q, k, v, scale, mask, added), interior


def _scaled_scores(node):
    """(scale, [the scaling node, if any], the product ``q @ k^T``, the transpose) of ``node``,
    ``q @ k^T`` times, or divided by, a number or not scaled; else None."""
    scaled, scale = [], 1.0
    name = op_name(node) if node.op in ("call_function", "call_method") else ""
    if name in ("mul", "__mul__", "truediv", "div", "__truediv__") and len(node.args) == 2 and not node.kwargs:
        first, second = node.args
        if name in ("mul", "__mul__") and _number(first) and hasattr(second, "op"):
            first, second = second, first
        if not (_number(second) and hasattr(first, "op")) or not _is_scores(first) or (name not in ("mul", "__mul__")
                                                                                         and second == 0):
            return None
        scale = float(second) if name in ("mul", "__mul__") else 1.0 / float(second)
        scaled, node = [node], first
    if not _is_scores(node):
        return None
    return scale, scaled, node, node.args[1]


def _is_scores(node) -> bool:
    """``node`` is ``q @ k^T``: a product of a tensor with the transpose of another's last two dimensions."""
    if not hasattr(node, "op") or node.op not in ("call_function", "call_method") or op_name(node) not in _MATMULS:
        return False
    if len(node.args) != 2 or node.kwargs or not all(hasattr(a, "op") for a in node.args):
        return False
    kt = node.args[1]
    rank = len(float_shape(kt) or ())
    if rank < 2 or kt.op not in ("call_function", "call_method") or kt.kwargs:
        return False
    last = {rank - 2, rank - 1}
    if op_name(kt) in ("transpose", "swapaxes", "swapdims") and len(kt.args) == 3:
        return all(isinstance(d, int) for d in kt.args[1:]) and {d % rank for d in kt.args[1:]} == last
    if op_name(kt) == "permute":
        dims = kt.args[1] if len(kt.args) == 2 and isinstance(kt.args[1], (tuple, list)) else kt.args[1:]
        order = [d % rank for d in dims] if all(isinstance(d, int) for d in dims) else []
        return order == [*range(rank - 2), rank - 1, rank - 2]
    return False


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _last_dim_softmax(gm, node) -> bool:
    """``node`` is a softmax over its input's last dimension in the input's dtype."""
    if not hasattr(node, "op"):
        return False
    rank = len(float_shape(node) or ())
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        return (type(module).__name__ == "Softmax" and len(node.args) == 1 and not node.kwargs and rank
                and isinstance(module.dim, int) and module.dim % rank == rank - 1)
    if node.op not in ("call_function", "call_method") or op_name(node) != "softmax" or not node.args or not rank:
        return False
    if node.op == "call_function" and getattr(node.target, "__module__", "") not in (
            "torch", "torch.nn.functional", "torch._C._VariableFunctions"):
        return False
    given = dict(zip(("input", "dim"), node.args)) | dict(node.kwargs)
    dim = given.get("dim")
    return (len(node.args) <= 2 and not set(given) - {"input", "dim", "_stacklevel", "dtype"}
            and given.get("dtype") is None and isinstance(dim, int) and dim % rank == rank - 1)


def _identity(gm, node) -> bool:
    """``node`` returns its input as it is: nn.Identity, a dropout (module or function) of p 0."""
    if not hasattr(node, "op") or not node.args or not hasattr(node.args[0], "op"):
        return False
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        kind = type(module).__name__
        return kind == "Identity" or (kind == "Dropout" and (module.p == 0 or not module.training))
    if node.op == "call_function" and op_name(node) == "dropout":
        given = dict(zip(("input", "p", "training"), node.args)) | dict(node.kwargs)
        return given.get("p", 0.5) == 0 or given.get("training", True) is False
    return False
