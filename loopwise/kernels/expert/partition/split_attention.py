"""Attention the flash part refuses as slower, computed the way PyTorch computes it: a matmul, a
softmax and a matmul, each a Triton part of the plan.

Where heads are so wide that every flash program would recompute the scores
(:func:`~..attention_plan.attention_recompute_reason`), the score matrix is small next to the
operands and writing it out costs less than recomputing it. Each such
``F.scaled_dot_product_attention`` call (:func:`~.attention.split_call`; attention written out is
that call too, :func:`~.attention.explicit_attention`) becomes three nodes of the graph, each
computed by a part the plan's machinery renders:

- the scores, ``q @ k^T``: a batched GEMM of two activations (:class:`~.records.Gemm` without a
  model matrix) whose epilogue applies the scale, the causal mask and the attention mask
  (:class:`~.records.ScoresOp`) to each output tile in registers; stored in fp32 whatever the
  inputs' dtype, as PyTorch's fused kernels keep them (a half-precision score rounds the
  softmax's exponent);
- the weights, the softmax over the keys: a row part (:class:`~.records.RowOp`, templates/_rowop.j2)
  in the inputs' dtype; a query no key takes part for gets zeros, as the call gives, or NaN
  where the attention was written out (softmax of a row of -inf);
- the output, ``weights @ v``: a batched GEMM of two activations (an fp32 v copied K-major first,
  as the tensor cores read fp32 operands), which for a causal call stops each row tile's sum at
  its last row (the weights past the diagonal are zeros).

A mask the call reads inverted (``logical_not(m)``, attention written out with
``masked_fill(m, -inf)``) and that nothing else reads is read as it is, its True dropping a key.
"""

from __future__ import annotations

from loopwise.kernels.expert.fx_graph import call_arg, op_name
from loopwise.kernels.expert.partition.attention import split_call
from loopwise.kernels.expert.partition.nodes import float_shape
from loopwise.kernels.expert.partition.records import Gemm, Norm, RowOp, ScoresOp

_MASK_OPS = {1: "attn_mask", 2: "attn_mask", 3: "masked_fill"}


def attention_scores(*_args):
    """The split's scores node: the scores GEMM part computes it (never called)."""
    raise AssertionError("a part computes the scores")


def attention_weights(*_args):
    """The split's weights node: the softmax row part computes it (never called)."""
    raise AssertionError("a part computes the weights")


def attention_values(*_args):
    """The split's output node: the values GEMM part computes it (never called)."""
    raise AssertionError("a part computes the output")


def split_attention(gm) -> tuple[list, list]:
    """Rewrites each attention call of ``gm`` that the split computes (see the module's docstring)
    as its scores, weights and output nodes. Returns ([(Gemm, (the node it computes, its input
    nodes))] for the two products of each, [(Norm of kind ``row``, (the weights node, [the scores
    node]))] for each softmax). Shapes (``tensor_meta``) must have been propagated."""
    graph = gm.graph
    gemms, norms = [], []
    for node in list(graph.nodes):
        if node.op != "call_function" or op_name(node) != "scaled_dot_product_attention":
            continue
        op = split_call(node)
        if op is None:
            continue
        q, k, v = node.args[:3]
        mask, kind = _mask(node, op.mask)
        scores, weights, out = _nodes(graph, node, (q, k, *([mask] if mask is not None else ())), v, op.dtype)
        shape = float_shape(q)[:-2]
        label = "scaled_dot_product_attention" + (" (causal)" if op.causal else "")
        ops = ("matmul", "scale", *(["causal_mask"] if op.causal else []), *([_MASK_OPS[kind]] if kind else []))
        gemms.append((Gemm(f"{label}: the scores q @ k^T", "", "", (), (), "x0", ops, dtype=op.dtype,
                           out_dtype="float32", batched=True, scores=ScoresOp(op.scale, op.causal, kind)),
                      (scores, scores.args)))
        gemms.append((Gemm(f"{label}: the output, the weights @ v", "", "", (), (), "x0", ("matmul",), dtype=op.dtype,
                           out_dtype=op.dtype, weight_kn=True, batched=True, causal_rows=op.causal),
                      (out, out.args)))
        last = len(shape) + 1
        row = RowOp("softmax", last, last, neutral='-float("inf")', out_dtype=op.dtype, safe=not op.empty_nan)
        norms.append((Norm("", "row", inputs=1, operands=(), body=(), expr="x0", ops=("softmax",), row=row,
                           out_dtype=op.dtype), (weights, [scores])))
    if gemms:
        graph.lint()
        gm.recompile()
    return gemms, norms


def _mask(node, kind: int):
    """(the mask node the scores part reads, its :class:`~.records.ScoresOp` kind): the call's
    mask, or the input of its ``logical_not`` where nothing else reads that (read as it is, True
    dropping a key); (None, 0) without a mask."""
    import torch

    mask = call_arg(node, "attn_mask", 3) if kind else None
    if mask is not None and kind == 1 and mask.op == "call_function" and mask.target is torch.logical_not \
            and len(mask.args) == 1 and not mask.kwargs and list(mask.users) == [node]:
        return mask.args[0], 3
    return mask, kind


def _nodes(graph, node, reads: tuple, v, dtype: str):
    """The scores, weights and output nodes in place of the attention call ``node`` (erased, with
    an inverted mask only it read), the scores computed from ``reads`` (q, k and the mask, if any)."""
    import torch
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    scores_shape = (*float_shape(node.args[0])[:-1], float_shape(node.args[1])[-2])
    with graph.inserting_before(node):
        scores = graph.call_function(attention_scores, reads)
        weights = graph.call_function(attention_weights, (scores,))
        out = graph.call_function(attention_values, (weights, v))
    for made, kind in ((scores, torch.float32), (weights, getattr(torch, dtype))):
        made.meta["tensor_meta"] = _extract_tensor_metadata(torch.empty(scores_shape, dtype=kind, device="meta"))
    out.meta["tensor_meta"] = node.meta.get("tensor_meta")
    node.replace_all_uses_with(out)
    inverted = call_arg(node, "attn_mask", 3)
    graph.erase_node(node)
    if inverted is not None and inverted not in reads and not inverted.users:
        graph.erase_node(inverted)
    return scores, weights, out
