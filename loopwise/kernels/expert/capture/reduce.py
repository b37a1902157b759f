"""The reduction detector: one reduction of the forward's input over one dimension or a run of
adjacent dimensions."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import call_arg, graph_inputs, op_name, single
from loopwise.kernels.expert.pattern import Pattern


# torch's reductions, by the name the template knows them under; max / min with a dim return
# (values, indices), picked by [0] / [1] or .values / .indices.
REDUCTIONS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "argmax": "argmax", "argmin": "argmin",
               "max": "max", "min": "min", "logsumexp": "logsumexp", "var": "var", "std": "std", "norm": "norm",
               "linalg_vector_norm": "norm", "vector_norm": "norm"}

NEUTRAL = {"sum": "0.0", "mean": "0.0", "max": '-float("inf")', "argmax": '-float("inf")',
            "min": 'float("inf")', "argmin": 'float("inf")', "logsumexp": '-float("inf")', "var": "0.0",
            "std": "0.0", "norm": "0.0"}

# what each reduction's keyword arguments may be (others are not the template's)
KEYWORDS = {"var": ("dim", "keepdim", "unbiased", "correction"), "std": ("dim", "keepdim", "unbiased", "correction"),
             "norm": ("dim", "keepdim", "p", "ord", "out", "dtype")}

_FLOATS = ("float32", "float16", "bfloat16")


def detect_reduce(gm, model, args) -> Pattern | None:
    """A forward that is one reduction (sum, mean, max, min, amax, amin, argmax, argmin, logsumexp,
    var, std, the 2-norm) of its one float input (fp32, fp16 or bf16) over one dimension, or over a
    run of adjacent dimensions for those that take several. None when the forward is anything else."""
    import operator

    import torch

    if len(args) != 1 or not isinstance(args[0], torch.Tensor) or args[0].dim() < 1 \
            or str(args[0].dtype).removeprefix("torch.") not in _FLOATS:
        return None
    (x,) = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if not calls or len(calls) > 2 or calls[0].op not in ("call_function", "call_method") or calls[0].args[:1] != (x,):
        return None
    node = calls[0]
    name = op_name(node)
    if name not in REDUCTIONS:
        return None
    op = REDUCTIONS[name]
    if any(k not in KEYWORDS.get(op, ("dim", "keepdim")) for k in node.kwargs) or (
            op == "norm" and (node.kwargs.get("out") is not None or node.kwargs.get("dtype") is not None)):
        return None
    first, last, keepdim, correction = dims_and_options(node, op, args[0].dim())
    if op in ("argmax", "argmin", "max", "min") and first != last:
        raise ew.Unsupported(f"{name} over dimensions {first}..{last}: one dimension is what it reduces")
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
                   params=(("op", op), ("dim", first), ("last", last), ("keepdim", keepdim),
                           ("neutral", NEUTRAL[op]), ("correction", correction),
                           ("dtype", str(args[0].dtype).removeprefix("torch."))))


def dims_and_options(node, op: str, rank: int, whole: bool = False) -> tuple[int, int, bool, int]:
    """(first, last reduced dimension, keepdim, var/std's correction) of a reduction call, the
    dimensions as non-negative indices of a run of adjacent ones; with ``whole``, a call that names
    no dimension reduces them all.

    Raises:
        ew.Unsupported: what the template cannot reduce, with why.
    """
    ordered, keepdim, correction = reduced_dims(node, op, rank, whole)
    if list(ordered) != list(range(ordered[0], ordered[-1] + 1)):
        raise ew.Unsupported(f"{op} over dimensions {ordered}: not a run of adjacent dimensions")
    return ordered[0], ordered[-1], keepdim, correction


def reduced_dims(node, op: str, rank: int, whole: bool = False) -> tuple[tuple[int, ...], bool, int]:
    """(the reduced dimensions, non-negative and in order, keepdim, var/std's correction) of a
    reduction call; with ``whole``, a call that names no dimension reduces them all.

    Raises:
        ew.Unsupported: options or dimensions a reduction's template does not read, with why.
    """
    if op == "norm":
        order = node.kwargs.get("p", node.kwargs.get("ord", node.args[1] if len(node.args) > 1 else 2))
        if order not in (2, 2.0, "fro"):
            raise ew.Unsupported(f"a norm of order {order!r}: the template takes the 2-norm")
        dim = node.kwargs.get("dim", node.args[2] if len(node.args) > 2 else None)
        keepdim = node.kwargs.get("keepdim", node.args[3] if len(node.args) > 3 else False)
    else:
        dim, keepdim = single(call_arg(node, "dim", 1)), call_arg(node, "keepdim", 2, False)
    if len(node.args) > {"norm": 4, "var": 2, "std": 2}.get(op, 3) or not isinstance(keepdim, bool):
        raise ew.Unsupported(f"{op} with positional options the template does not read")
    dims = dim if isinstance(dim, (tuple, list)) else tuple(range(rank)) if whole and dim is None else (dim,)
    if not dims or not all(isinstance(d, int) and not isinstance(d, bool) and -rank <= d < rank for d in dims):
        raise ew.Unsupported(f"{op} over {dim!r}: constant dimensions (one, or a run of adjacent ones) are what "
                             "the template reduces")
    ordered = tuple(sorted({d % rank for d in dims}))
    if len(ordered) != len(dims):
        raise ew.Unsupported(f"{op} over dimensions {tuple(dims)}: a dimension named twice")
    correction = 1
    if op in ("var", "std"):
        unbiased, corr = node.kwargs.get("unbiased"), node.kwargs.get("correction")
        correction = int(corr) if isinstance(corr, (int, float)) and not isinstance(corr, bool) else (
            0 if unbiased is False else 1)
    return ordered, keepdim, correction
