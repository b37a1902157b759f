"""The LayerNorm detector: one nn.LayerNorm over trailing dimensions of one float32 input."""

from __future__ import annotations

from loopwise.kernels.expert.fx_graph import one_float_input
from loopwise.kernels.expert.pattern import Pattern


def detect_layernorm(gm, model, args) -> Pattern | None:
    """A model whose forward is one nn.LayerNorm over trailing dimensions of one float32 input."""
    import torch.nn as nn

    if not one_float_input(args):
        return None
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_module":
        return None
    ln = gm.get_submodule(calls[0].target)
    shape = tuple(ln.normalized_shape) if isinstance(ln, nn.LayerNorm) else None
    if shape is None or tuple(args[0].shape[-len(shape):]) != shape or getattr(ln, "bias", 1) is None:
        return None
    n_cols = 1
    for d in shape:
        n_cols *= d
    return Pattern("layernorm", inputs=1, ops=("layer_norm",),
                   params=(("shape", shape), ("eps", float(ln.eps)), ("affine", bool(ln.elementwise_affine)),
                           ("n_cols", n_cols), ("ndims", len(shape))))

