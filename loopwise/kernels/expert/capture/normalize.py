"""The normalization detector: the input divided by a statistic of itself over one dimension."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import call_arg, graph_inputs, one_float_input, op_name, single
from loopwise.kernels.expert.pattern import Pattern


def detect_normalize(gm, model, args) -> Pattern | None:
    """``x / s`` where ``s`` is a statistic of x over one dimension, kept for broadcasting: the sum or
    mean of x, |x| or x**2 (or ``torch.norm(x, p=2, dim, keepdim=True)``), then constants added and
    square roots taken (RMSNorm, L1 and L2 normalization). None when the forward is anything else."""
    import operator

    import torch

    if not one_float_input(args):
        return None
    (x,) = graph_inputs(gm)
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    div = out.args[0]
    if not (hasattr(div, "op") and div.op == "call_function" and div.target in (operator.truediv, torch.div)
            and len(div.args) == 2 and div.args[0] is x and hasattr(div.args[1], "op") and not div.kwargs):
        return None
    chain, node = [], div.args[1]  # from the statistic back to x
    while node is not x:
        inputs = node.all_input_nodes
        if len(inputs) != 1 or node.op not in ("call_function", "call_method"):
            return None
        chain.append(node)
        node = inputs[0]
    chain.reverse()
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != len(chain) + 1:
        return None  # something else is computed beside the statistic

    pre, ops = "x", []
    first = chain[0] if chain else None
    if first is not None and (op_name(first) in ("pow", "square") and first.args[1:] in ((2,), ()) or
                              first.target is operator.mul and first.args == (x, x)):
        pre, ops, chain = "x * x", ["square"], chain[1:]
    elif first is not None and op_name(first) == "abs":
        pre, ops, chain = "tl.abs(x)", ["abs"], chain[1:]
    if not chain:
        return None
    reduce = chain[0]
    dim, keepdim = single(call_arg(reduce, "dim", 1)), call_arg(reduce, "keepdim", 2, False)
    post, mean = "stat", False
    if op_name(reduce) in ("sum", "mean"):
        mean = op_name(reduce) == "mean"
        ops.append(op_name(reduce))
    elif op_name(reduce) == "norm" and pre == "x" and reduce.kwargs.get("p", 2) == 2 and len(reduce.args) == 1:
        pre, post = "x * x", "tl.sqrt(stat)"
        ops.append("norm2")
    else:
        return None
    if not isinstance(dim, int) or isinstance(dim, bool) or keepdim is not True:
        raise ew.Unsupported("a statistic over one dimension, kept (keepdim=True), is what the template divides by")
    if not -args[0].dim() <= dim < args[0].dim():
        return None
    for step in chain[1:]:
        if step.target in (operator.add, torch.add) and len(step.args) == 2 and step.args[0] is not None \
                and not hasattr(step.args[1], "op"):
            post, op = f"({post} + {ew.literal(step.args[1])})", "add"
        elif op_name(step) in ("sqrt",):
            post, op = f"tl.sqrt({post})", "sqrt"
        else:
            return None
        ops.append(op)
    text = {("x * x", True): "the mean of x**2", ("x * x", False): "the sum of x**2",
            ("tl.abs(x)", True): "the mean of |x|", ("tl.abs(x)", False): "the sum of |x|",
            ("x", True): "the mean of x", ("x", False): "the sum of x"}[(pre, mean)]
    if post != "stat":
        text += f", s, then {post.replace('stat', 's').replace('tl.', '')}"
    return Pattern("norm", inputs=1, ops=tuple(ops + ["div"]),
                   params=(("dim", dim), ("pre", pre), ("mean", mean), ("post", post), ("stat_text", text)))

