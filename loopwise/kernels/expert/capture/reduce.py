"""The reduction detector: one reduction of the forward's input over one dimension."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import call_arg, graph_inputs, one_float_input, op_name, single
from loopwise.kernels.expert.pattern import Pattern


# torch's reductions over one dimension, by the name the template knows them under; max / min with
# a dim return (values, indices), picked by [0] / [1] or .values / .indices.
_REDUCTIONS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "argmax": "argmax", "argmin": "argmin",
               "max": "max", "min": "min"}


_NEUTRAL = {"sum": "0.0", "mean": "0.0", "max": '-float("inf")', "argmax": '-float("inf")',
            "min": 'float("inf")', "argmin": 'float("inf")'}


def detect_reduce(gm, model, args) -> Pattern | None:
    """A forward that is one reduction (sum, mean, max, min, amax, amin, argmax, argmin) of its one
    float32 input over one dimension. None when the forward is anything else."""
    import operator


    if not one_float_input(args):
        return None
    (x,) = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if not calls or len(calls) > 2 or calls[0].op not in ("call_function", "call_method") or calls[0].args[:1] != (x,):
        return None
    node = calls[0]
    name = op_name(node)
    if name not in _REDUCTIONS or any(k not in ("dim", "keepdim") for k in node.kwargs):
        return None
    dim, keepdim = single(call_arg(node, "dim", 1)), call_arg(node, "keepdim", 2, False)
    if not isinstance(dim, int) or isinstance(dim, bool) or not isinstance(keepdim, bool) or len(node.args) > 3:
        raise ew.Unsupported(f"{name} over {dim!r}: one dimension, given as an int, is what the template reduces")
    if not -args[0].dim() <= dim < args[0].dim():
        return None
    op = _REDUCTIONS[name]
    if name in ("max", "min"):  # (values, indices): which one is returned
        if len(calls) != 2:
            return None
        pick = calls[1]
        if pick.op == "call_function" and pick.target is operator.getitem and pick.args[1:] in ((0,), (1,)):
            op = op if pick.args[1] == 0 else "arg" + op
        elif pick.op == "call_function" and pick.target is getattr and pick.args[1:] in (("values",), ("indices",)):
            op = op if pick.args[1] == "values" else "arg" + op
        else:
            return None
    elif len(calls) != 1:
        return None
    return Pattern("reduce", inputs=1, ops=(op,),
                   params=(("op", op), ("dim", dim), ("keepdim", keepdim), ("neutral", _NEUTRAL[op])))

