"""The attention detector: one scaled_dot_product_attention of the forward's three inputs."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.attention_plan import attention_recompute_reason
from loopwise.kernels.expert.capture.matmul import MATMUL_DTYPES
from loopwise.kernels.expert.fx_graph import call_arg, graph_inputs, op_name
from loopwise.kernels.expert.pattern import Pattern


def detect_attention(gm, model, args) -> Pattern | None:
    """A forward that is one ``F.scaled_dot_product_attention(q, k, v)`` of its three inputs (float32,
    bfloat16 or float16, at least 3-D, batch dimensions alike), without a mask or dropout, with
    ``is_causal`` and ``scale`` given as constants if at all: flash-style attention. None when the
    forward is anything else."""
    import torch

    if len(args) != 3 or not all(isinstance(a, torch.Tensor) and a.dim() >= 3 for a in args):
        return None
    q, k, v = args
    dtype = str(q.dtype).removeprefix("torch.")
    if dtype not in MATMUL_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return None
    placeholders = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_function" or op_name(calls[0]) != "scaled_dot_product_attention":
        return None
    call = calls[0]
    if list(call.args[:3]) != placeholders:
        return None
    mask, dropout = call_arg(call, "attn_mask", 3), call_arg(call, "dropout_p", 4, 0.0)
    causal, scale = call_arg(call, "is_causal", 5, False), call_arg(call, "scale", 6)
    gqa = call.kwargs.get("enable_gqa", False)
    if mask is not None or dropout not in (0, 0.0) or not isinstance(causal, bool) or gqa \
            or not (scale is None or isinstance(scale, (int, float))):
        raise ew.Unsupported("scaled_dot_product_attention with a mask, dropout, grouped heads or a computed "
                             "scale or causal flag")
    batch = tuple(q.shape[:-2])
    if tuple(k.shape[:-2]) != batch or tuple(v.shape[:-2]) != batch or k.shape[-1] != q.shape[-1] \
            or v.shape[-2] != k.shape[-2]:
        raise ew.Unsupported("scaled_dot_product_attention with broadcast batch dimensions")
    d, dv = int(q.shape[-1]), int(v.shape[-1])
    pattern = Pattern("attention", inputs=3, ops=("attention",),
                      params=(("sq", int(q.shape[-2])), ("sk", int(k.shape[-2])), ("d", d), ("dv", dv),
                              ("causal", causal), ("scale", float(scale) if scale is not None else d ** -0.5),
                              ("dtype", dtype)))
    reason = attention_recompute_reason(pattern)
    if reason:
        raise ew.Unsupported(reason)
    return pattern

