"""The cross-entropy detector: one cross-entropy loss of float32 logits against class indices."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import call_arg, graph_inputs
from loopwise.kernels.expert.pattern import Pattern


def detect_cross_entropy(gm, model, args) -> Pattern | None:
    """A forward that is one cross-entropy loss (``F.cross_entropy`` or ``nn.CrossEntropyLoss``)
    of float32 logits (rows x classes) against int64 class indices: a row reduction (log-sum-exp,
    minus the target's logit) read once per row, then the mean, sum or the rows themselves. None
    when the forward is anything else."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if len(args) != 2 or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1:
        return None
    (call,) = calls
    placeholders = graph_inputs(gm)
    if call.op == "call_function" and call.target is F.cross_entropy:
        if tuple(call.args[:2]) != tuple(placeholders):
            return None
        options = {name: call_arg(call, name, position, default) for name, position, default in (
            ("weight", 2, None), ("size_average", 3, None), ("ignore_index", 4, -100), ("reduce", 5, None),
            ("reduction", 6, "mean"), ("label_smoothing", 7, 0.0))}
    elif call.op == "call_module" and type(gm.get_submodule(call.target)) is nn.CrossEntropyLoss:
        if tuple(call.args) != tuple(placeholders) or call.kwargs:
            return None
        loss = gm.get_submodule(call.target)
        options = {"weight": loss.weight, "size_average": None, "ignore_index": loss.ignore_index, "reduce": None,
                   "reduction": loss.reduction, "label_smoothing": loss.label_smoothing}
    else:
        return None
    logits, targets = args
    if logits.dtype != torch.float32 or logits.dim() != 2:
        raise ew.Unsupported(f"cross-entropy over {logits.dtype} logits of {logits.dim()} dimension(s) (the template "
                             "takes float32 rows x classes)")
    if targets.dtype != torch.int64 or tuple(targets.shape) != tuple(logits.shape[:1]):
        raise ew.Unsupported("cross-entropy against class probabilities, or targets not one int64 index per row")
    unsupported = [f"{name}={value!r}" for name, value in options.items()
                   if name in ("weight", "size_average", "reduce") and value is not None]
    unsupported += [f"label_smoothing={options['label_smoothing']!r}"] if options["label_smoothing"] else []
    if unsupported or options["reduction"] not in ("mean", "sum", "none") or not isinstance(options["ignore_index"], int):
        raise ew.Unsupported(f"cross-entropy with {', '.join(unsupported) or options} (the template takes class indices, "
                             "no class weights or label smoothing)")
    return Pattern("cross_entropy", inputs=2, ops=("cross_entropy",),
                   params=(("ignore_index", options["ignore_index"]), ("reduction", options["reduction"]),
                           ("classes", int(logits.shape[1]))))

