"""The scan detector: a cumulative sum or product along one dimension."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import call_arg, flip_dim, graph_inputs, op_name
from loopwise.kernels.expert.pattern import Pattern


def detect_scan(gm, model, args) -> Pattern | None:
    """A forward that is a cumulative sum or product along one dimension of its float32 input,
    possibly reversed (``x.flip(d).cumsum(d).flip(d)``) or of ``x * mask`` with a second input of
    x's shape (bool or float). None when the forward is anything else."""
    import operator

    import torch

    if not 1 <= len(args) <= 2 or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    x = args[0]
    if x.dtype != torch.float32 or x.dim() < 1 or any(tuple(a.shape) != tuple(x.shape) for a in args[1:]):
        return None
    placeholders = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    scans = [n for n in calls if op_name(n) in ("cumsum", "cumprod")]
    if len(scans) != 1:
        return None
    (scan,) = scans
    dim = call_arg(scan, "dim", 1)
    if not isinstance(dim, int) or isinstance(dim, bool) or not -x.dim() <= dim < x.dim():
        raise ew.Unsupported(f"{op_name(scan)} over dim {dim!r}: a constant dimension is what the template scans")
    dim %= x.dim()

    source, rest = scan.args[0], [n for n in calls if n is not scan]
    reverse = masked = False
    if rest and len(rest) == 2 and source is rest[0] and flip_dim(rest[0], placeholders[0], x.dim()) == dim \
            and flip_dim(rest[1], scan, x.dim()) == dim:
        reverse, source, rest = True, placeholders[0], []
    if (len(rest) == 1 and len(args) == 2 and rest[0] is source and rest[0].op == "call_function"
            and rest[0].target in (operator.mul, torch.mul) and set(rest[0].args) == set(placeholders)):
        masked, source, rest = True, placeholders[0], []
    if rest or source is not placeholders[0] or len(args) != 1 + masked:
        return None
    op = op_name(scan)
    return Pattern("scan", inputs=len(args), ops=(op,),
                   params=(("op", op), ("dim", dim), ("reverse", reverse), ("masked", masked),
                           ("neutral", "0.0" if op == "cumsum" else "1.0"), ("length", int(x.shape[dim]))))

