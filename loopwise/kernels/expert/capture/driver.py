"""The capture: a problem's forward traced with torch.fx and offered to the detectors in order,
most specific first; the first that returns a pattern takes the whole forward. A forward none takes
is a chain of elementwise operations, or else partitioned (fused groups, the rest left to
PyTorch), or unsupported with the reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.capture.attention import detect_attention
from loopwise.kernels.expert.capture.conv import detect_conv
from loopwise.kernels.expert.capture.conv_epilogue import detect_conv_epilogue
from loopwise.kernels.expert.capture.cross_entropy import detect_cross_entropy
from loopwise.kernels.expert.capture.elementwise import detect_elementwise
from loopwise.kernels.expert.capture.layernorm import detect_layernorm
from loopwise.kernels.expert.capture.linear import detect_linear_epilogue
from loopwise.kernels.expert.capture.matmul import detect_batched_matmul, detect_matmul
from loopwise.kernels.expert.capture.normalize import detect_normalize
from loopwise.kernels.expert.capture.pooling import detect_pooling
from loopwise.kernels.expert.capture.recurrent import detect_recurrent
from loopwise.kernels.expert.capture.reduce import detect_reduce
from loopwise.kernels.expert.capture.scan import detect_scan
from loopwise.kernels.expert.capture.separable_conv import detect_separable_conv
from loopwise.kernels.expert.capture.softmax import detect_row_softmax
from loopwise.kernels.expert.capture.topk import detect_topk
from loopwise.kernels.expert.functionalize import visible_writes
from loopwise.kernels.expert.fx_graph import meta_model, op_name, trace_as_called
from loopwise.kernels.expert.partition import kinds, partition, plan
from loopwise.kernels.expert.pattern import Pattern
from loopwise.kernels.expert.reference_init import reference_init
from loopwise.kernels.problem import MODELS_IN_PROCESS

# The whole-forward detectors, most specific first: each returns the forward's pattern or None.
WHOLE_FORWARD_DETECTORS = (detect_recurrent, detect_attention, detect_layernorm, detect_matmul, detect_batched_matmul, detect_linear_epilogue, detect_conv,
                           detect_separable_conv, detect_conv_epilogue, detect_reduce, detect_topk, detect_scan, detect_normalize,
                           detect_pooling, detect_cross_entropy)


def capture(problem) -> Pattern:
    """The pattern of ``problem``'s forward (never raises for an unsupported model). It builds,
    traces and runs the model on the meta device under :data:`MODELS_IN_PROCESS`: one capture at
    a time in a process."""
    with MODELS_IN_PROCESS:
        return _capture(problem)


def _capture(problem) -> Pattern:
    model = None
    try:
        module, model, args = _meta_model(problem)
        gm, whole = _trace(model, args)
        if whole is None:
            pattern = detect_row_softmax(gm, model, args) or detect_elementwise(gm, model, args)
            if pattern.operands:  # ModelNew must hold the same tensors: it runs the reference's __init__
                init = reference_init(problem.source, module)
                pattern = replace(pattern, init=init.text, constants=init.constants, helpers=init.helpers)
            return pattern
    except ew.Unsupported as exc:
        return _unless_random(model, _partitioned(problem, str(exc)))
    except Exception as exc:  # noqa: BLE001 - tracing fails on data-dependent control flow, etc.
        return _unless_random(model, _partitioned(problem, f"cannot trace forward ({type(exc).__name__}: {exc})"))
    if whole.operands or whole.prologue:  # ModelNew holds the same weights: the reference's __init__
        init = reference_init(problem.source, problem.load_module())
        whole = replace(whole, init=init.text, constants=init.constants, helpers=init.helpers)
    return whole


def _meta_model(problem):
    """``problem``'s module, its Model built on the meta device (no memory, no kernels) and its inputs."""
    module = problem.load_module()
    return (module, *meta_model(module))


def _trace(model, args):
    """(the forward's FX graph, the pattern of the first whole-forward detector that takes it, or
    None). Raises ew.Unsupported where no detector takes it and its inputs rule the elementwise
    path out."""
    import torch

    try:
        gm = trace_as_called(model, args)
    except ew.Unsupported:
        raise
    except Exception:  # noqa: BLE001 - not traceable: no template applies (the generic path says why)
        gm = None
    visible = visible_writes(gm) if gm is not None else []
    if visible:  # the templates compute out of place: only the partitioner keeps a write where it is
        raise ew.Unsupported(f"an in-place write that a later read sees ({', '.join(op_name(n) or str(n.target) for n in visible)})")
    if gm is not None:
        for detect in WHOLE_FORWARD_DETECTORS:
            found = detect(gm, model, args)
            if found is not None:
                return gm, found
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    numbers = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    if len(tensors) + len(numbers) != len(args) or not tensors:
        raise ew.Unsupported("inputs other than tensors and plain numbers")
    odd = sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.dtype not in ew.FLOAT_DTYPES})
    if odd:
        raise ew.Unsupported(f"inputs of dtype {', '.join(odd)} (fused passes read float32, float16 and bfloat16)")
    return (gm if gm is not None else trace_as_called(model, args)), None


def _unless_random(model, pattern: Pattern) -> Pattern:
    """``pattern`` (a partitioned forward, which leaves modules such as Dropout to PyTorch), or
    unsupported where the model's output is random: no candidate can match a reference that does
    not match itself, so none is proposed (each would fail the judge's comparison). ``model`` is the
    problem's Model on the meta device, or None where it could not be built (nothing known)."""
    reason = _random_output(model) if model is not None else ""
    return replace(pattern, kind="unsupported", reason=f"{reason}; {pattern.reason}") if reason else pattern


def _random_output(model) -> str:
    """Why ``model``'s output is random (a dropout module with p > 0 in training mode, the mode the
    judge runs both models in), or "" when it is not known to be."""
    from torch import nn

    dropouts = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
    for name, sub in model.named_modules():
        if isinstance(sub, dropouts) and sub.p > 0 and sub.training:
            return (f"{name or 'the model'} is a {type(sub).__name__} with p={sub.p} in training mode: the "
                    "output is random, so no candidate can match the reference (nor can the reference match "
                    "itself)")
    return ""


def _partitioned(problem, whole: str) -> Pattern:
    """No template takes the whole forward (``whole`` says why): its fusible groups, with the rest
    left to PyTorch (:mod:`partition`), or unsupported with both reasons."""
    try:
        pattern = partition(problem)
    except ew.Unsupported as exc:
        return Pattern("unsupported", reason=f"{whole}; {exc}" if str(exc) not in whole else whole)
    except Exception as exc:  # noqa: BLE001 - never raise for a model the expert cannot take
        return Pattern("unsupported", reason=f"{whole}; partition failed ({type(exc).__name__}: {exc})")
    parts = []
    for kind in kinds(pattern):
        p = plan(pattern, kind)
        fused = (*p["gemms"], *p["norms"], *p["groups"])  # a GroupNorm is three launches, one part
        parts.append(f"{kind}: {len(fused)} Triton part(s) ({_listing('+'.join(g.ops) for g in fused)}), "
                     f"in PyTorch: {_listing(p['pytorch']) or 'nothing'}")
    return replace(pattern, reason=f"partial ({whole}); " + "; ".join(parts))


def _listing(names, most: int = 8) -> str:
    """``names`` joined in order, or, past ``most`` of them, each name once with its count (in order of
    first appearance), so a 200-layer network's reason stays one readable line."""
    names = list(names)
    if len(names) <= most:
        return ", ".join(names)
    counts = Counter(names)
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())

