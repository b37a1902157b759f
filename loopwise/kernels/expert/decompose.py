"""Composite PyTorch operations written out as the primitive ones the capture's detectors and the
partitioner know: the losses (smooth L1, Huber, L1, MSE, KL divergence, triplet margin), instance
normalization and the gated linear unit (GLU). Each is PyTorch's own definition, or a form equal to it that fused passes
can compute (the Huber losses without a comparison), so the rewritten graph computes what the call
did. Only calls on float32 tensors are rewritten (in half precision PyTorch's fused kernels
accumulate in float, which these operations would not). A call with arguments a rewrite does not
cover (a loss's deprecated ``size_average``, a triplet loss's ``p`` other than 1 or 2, an instance
norm that tracks running statistics or has affine parameters) is left as it is. (An einsum that is a matrix product is the product detectors'
own: :mod:`.contraction`.)

The rewrite works on the traced graph: the composite call's arguments become proxies of a tracer
that appends to that graph (fx's ``GraphAppendingTracer``), the definition runs on them, and its
result takes the call's place.
"""

from __future__ import annotations

import functools

_REDUCTIONS = ("mean", "sum", "none")


def decompose(gm, args):
    """``gm`` with every composite call it covers written out (in place; returned). ``args``: the
    forward's inputs, whose shapes (propagated on the meta device) fix the sizes a rewrite needs."""
    import torch
    from torch.fx.proxy import GraphAppendingTracer, Proxy

    from loopwise.kernels.expert.shapes import propagate_shapes

    graph = gm.graph
    if not any(_rule(gm, node) is not None for node in graph.nodes):
        return gm
    try:
        propagate_shapes(gm, args)  # on copies: a forward's in-place writes stay off the caller's inputs
    except Exception:  # noqa: BLE001 - no shapes (an operation without a meta kernel): nothing is rewritten
        return gm
    tracer = GraphAppendingTracer(graph)

    def wrap(a):
        return Proxy(a, tracer) if isinstance(a, torch.fx.Node) else a

    for node in list(graph.nodes):
        rule = _rule(gm, node)  # read now: an argument may be an earlier rewrite's result
        if rule is None:
            continue
        fn, named = rule
        metas = {k: v.meta.get("tensor_meta") for k, v in named.items() if isinstance(v, torch.fx.Node)}
        if not metas or any(m is None or m.dtype != torch.float32 for m in metas.values()):
            continue  # float32 only: in half, PyTorch's fused kernels accumulate in float, these would not
        shapes = {k: tuple(m.shape) for k, m in metas.items()}
        with graph.inserting_before(node):
            out = fn(**torch.fx.node.map_aggregate(named, wrap), shapes=shapes)
        out.node.meta["tensor_meta"] = node.meta.get("tensor_meta")  # the same shape and dtype as the call's
        node.replace_all_uses_with(out.node)
        graph.erase_node(node)
    graph.lint()
    gm.recompile()
    return gm


def _rule(gm, node):
    """(definition, its named arguments) that writes ``node`` out, or None."""
    if node.op == "call_module":
        found = _module_rule(gm.get_submodule(node.target), node.args, dict(node.kwargs))
    elif node.op == "call_function":
        found = _function_rule(node)
    else:
        return None
    if found is None:
        return None
    fn, named = found
    if fn is _triplet and named.get("p", 2) not in (1, 2):
        return None
    if named.get("reduction", "mean") not in _REDUCTIONS + (("batchmean",) if fn is _kl_div else ()):
        return None
    return found


@functools.lru_cache(maxsize=1)
def _functions() -> dict:
    """{loss function: (its definition, its parameters in order)}."""
    import torch.nn.functional as F

    return {F.smooth_l1_loss: (_smooth_l1, ("input", "target", "size_average", "reduce", "reduction", "beta")),
            F.huber_loss: (_huber, ("input", "target", "reduction", "delta", "weight")),
            F.l1_loss: (_l1, ("input", "target", "size_average", "reduce", "reduction")),
            F.mse_loss: (_mse, ("input", "target", "size_average", "reduce", "reduction", "weight")),
            F.kl_div: (_kl_div, ("input", "target", "size_average", "reduce", "reduction", "log_target")),
            F.triplet_margin_loss: (_triplet, ("anchor", "positive", "negative", "margin", "p", "eps", "swap",
                                               "size_average", "reduce", "reduction")),
            F.glu: (_glu, ("input", "dim"))}


def _function_rule(node):
    """The rule of a loss function's call, its options as the call gives them."""
    if node.target not in _functions():
        return None
    fn, names = _functions()[node.target]
    if len(node.args) > len(names):
        return None
    named = dict(zip(names, node.args)) | dict(node.kwargs)
    if any(named.pop(k, None) is not None for k in ("size_average", "reduce", "weight")) or not _plain(named):
        return None
    return fn, named


def _plain(named: dict) -> bool:
    """The options are numbers, strings or booleans (not values the forward computes)."""
    import torch

    tensors = {"input", "target", "anchor", "positive", "negative"}
    return not any(isinstance(v, torch.fx.Node) for k, v in named.items() if k not in tensors)


@functools.lru_cache(maxsize=1)
def _modules() -> dict:
    """{loss module class: (its definition, its options read from a module)}."""
    from torch import nn

    return {nn.SmoothL1Loss: (_smooth_l1, lambda m: {"reduction": m.reduction, "beta": m.beta}),
            nn.HuberLoss: (_huber, lambda m: {"reduction": m.reduction, "delta": m.delta}),
            nn.L1Loss: (_l1, lambda m: {"reduction": m.reduction}),
            nn.MSELoss: (_mse, lambda m: {"reduction": m.reduction}),
            nn.KLDivLoss: (_kl_div, lambda m: {"reduction": m.reduction, "log_target": m.log_target}),
            nn.TripletMarginLoss: (_triplet, lambda m: {"margin": m.margin, "p": m.p, "eps": m.eps,
                                                        "swap": m.swap, "reduction": m.reduction})}


def _module_rule(module, args, kwargs):
    """The rule of a loss or instance-norm module's call (its options read from the module)."""
    from torch import nn

    if kwargs:
        return None
    if type(module) in _modules():
        fn, options = _modules()[type(module)]
        names = ("anchor", "positive", "negative") if fn is _triplet else ("input", "target")
        if len(args) != len(names) or getattr(module, "weight", None) is not None:
            return None
        return fn, dict(zip(names, args)) | options(module)
    if type(module) is nn.GLU and len(args) == 1:
        return _glu, {"input": args[0], "dim": module.dim}
    norms = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)
    if type(module) in norms and not module.track_running_stats and not module.affine and len(args) == 1:
        return _instance_norm, {"input": args[0], "eps": module.eps, "spatial": module._get_no_batch_dim() - 1}
    return None


def _reduce(loss, reduction, batch=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "batchmean":
        return loss.sum() / batch
    return loss.mean()


def _smooth_l1(input, target, reduction="mean", beta=1.0, shapes=None):
    """PyTorch's ``where(|d| < beta, 0.5 d^2 / beta, |d| - 0.5 beta)`` as ``huber(d, beta) / beta``."""
    diff = (input - target).abs()
    return _reduce(diff if beta == 0 else _huber_of(diff, beta) / beta, reduction)


def _huber(input, target, reduction="mean", delta=1.0, shapes=None):
    return _reduce(_huber_of((input - target).abs(), delta), reduction)


def _huber_of(diff, delta):
    """PyTorch's ``where(|d| < delta, 0.5 d^2, delta (|d| - 0.5 delta))`` of ``diff`` = |d|, without
    a comparison (which no fused pass computes): with m = min(|d|, delta) it is m (|d| - 0.5 m), the
    first branch where |d| < delta and the second elsewhere (a NaN stays NaN)."""
    import torch

    m = torch.clamp(diff, max=delta)
    return m * (diff - 0.5 * m)


def _l1(input, target, reduction="mean", shapes=None):
    return _reduce((input - target).abs(), reduction)


def _mse(input, target, reduction="mean", shapes=None):
    diff = input - target
    return _reduce(diff * diff, reduction)


def _kl_div(input, target, reduction="mean", log_target=False, shapes=None):
    import torch

    if log_target:
        loss = torch.exp(target) * (target - input)
    else:  # xlogy(target, target) - target * input: a zero target contributes nothing, a negative one NaN
        loss = torch.where(target == 0, 0.0, target * torch.log(target)) - target * input
    if reduction == "batchmean" and not shapes["input"]:  # a 0-d input: PyTorch divides by nothing
        reduction = "sum"
    return _reduce(loss, reduction, shapes["input"][0] if reduction == "batchmean" else None)


def _triplet(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, reduction="mean", shapes=None):
    import torch

    def distance(a, b):  # F.pairwise_distance: the p-norm of a - b + eps over the last dimension
        d = a - b + eps
        return d.abs().sum(dim=-1) if p == 1 else torch.sqrt((d * d).sum(dim=-1))

    d_ap, d_an = distance(anchor, positive), distance(anchor, negative)
    if swap:
        d_an = torch.minimum(d_an, distance(positive, negative))
    return _reduce(torch.clamp(margin + d_ap - d_an, min=0.0), reduction)


def _instance_norm(input, eps, spatial, shapes):
    """nn.InstanceNorm without running statistics or affine parameters: each (sample, channel)
    normalized over its ``spatial`` trailing dimensions (one for InstanceNorm1d, two for 2d, three
    for 3d, whether or not the input has a batch dimension) with the biased variance."""
    import torch

    rank = len(shapes["input"])
    dims = tuple(range(rank - spatial, rank))
    mean = input.mean(dim=dims, keepdim=True)
    centered = input - mean
    return centered * torch.rsqrt((centered * centered).mean(dim=dims, keepdim=True) + eps)


def _glu(input, dim=-1, shapes=None):
    """F.glu: the first half of ``dim`` times the sigmoid of the second, the halves as narrows (which
    fused passes read through). Its shapes come from a propagation that ran PyTorch's own GLU, so
    ``dim``'s size is even here."""
    import torch

    dim = dim % len(shapes["input"])
    half = shapes["input"][dim] // 2
    return torch.narrow(input, dim, 0, half) * torch.sigmoid(torch.narrow(input, dim, half, half))
