"""The top-k detector: the k largest (or smallest) entries of the forward's input along one dimension."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import call_arg, graph_inputs, op_name
from loopwise.kernels.expert.pattern import Pattern

# Up to this k the template keeps the running top k in registers and selects each chunk's entries
# one at a time (k passes over the chunk); longer selections are a sort's job.
TOPK_MAX_K = 64

_FLOATS = ("float32", "float16", "bfloat16")


def detect_topk(gm, model, args) -> Pattern | None:
    """A forward that is ``torch.topk(x, k, dim, largest, sorted=True)`` of its one float input with
    k up to :data:`TOPK_MAX_K`, returning the values, the indices (``.values`` / ``.indices`` or
    ``[0]`` / ``[1]``) or both. None when the forward is anything else."""
    import operator

    import torch

    if len(args) != 1 or not isinstance(args[0], torch.Tensor) or args[0].dim() < 1:
        return None
    dtype = str(args[0].dtype).removeprefix("torch.")
    if dtype not in _FLOATS:
        return None
    (x,) = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if not calls or len(calls) > 2 or op_name(calls[0]) != "topk" or calls[0].args[:1] != (x,):
        return None
    node = calls[0]
    if any(key not in ("k", "dim", "largest", "sorted") for key in node.kwargs) or len(node.args) > 5:
        return None
    k, dim = call_arg(node, "k", 1), call_arg(node, "dim", 2, -1)
    largest, ordered = call_arg(node, "largest", 3, True), call_arg(node, "sorted", 4, True)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (k, dim)) or not isinstance(largest, bool):
        raise ew.Unsupported(f"topk with k={k!r}, dim={dim!r}: constant integers are what the template selects by")
    if ordered is not True:
        raise ew.Unsupported("topk with sorted=False: torch's order is unspecified, the template writes it sorted")
    if not -args[0].dim() <= dim < args[0].dim() or not 1 <= k <= min(TOPK_MAX_K, args[0].shape[dim]):
        raise ew.Unsupported(f"topk of k={k} over a dimension of {args[0].shape[dim] if -args[0].dim() <= dim < args[0].dim() else '?'}: "
                             f"the template selects 1 to {TOPK_MAX_K}")
    returns = "both"
    if len(calls) == 2:
        pick = calls[1]
        if pick.op == "call_function" and pick.target is operator.getitem and pick.args[1:] in ((0,), (1,)):
            returns = "values" if pick.args[1] == 0 else "indices"
        elif pick.op == "call_function" and pick.target is getattr and pick.args[1:] in (("values",), ("indices",)):
            returns = pick.args[1]
        else:
            return None
    return Pattern("topk", inputs=1, ops=("topk",),
                   params=(("k", k), ("dim", dim), ("largest", largest), ("returns", returns), ("dtype", dtype),
                           ("size", int(args[0].shape[dim]))))
