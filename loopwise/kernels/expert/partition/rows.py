"""Row operations of a partitioned forward: a softmax, log-softmax, reduction or scan along one
dimension (or, for a reduction that takes several, any set of them, all of them when it names
none) of a float tensor, at any position of the forward and over any dimension (leading,
middle or last), of any length (a long one split among programs: templates/_rowop.j2). Each becomes one
Triton part of the ``graph_norm`` plan (kind ``row`` of :class:`~.records.Norm`), the elementwise
work only it reads computed as it is read and the work only its output feeds applied before the
store, as the norms' parts do (:func:`~.norms.norm_passes`)."""

from __future__ import annotations

import operator
from dataclasses import replace

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.capture.reduce import KEYWORDS, NEUTRAL, REDUCTIONS, reduced_dims
from loopwise.kernels.expert.capture.softmax import is_log_softmax, softmax_dim
from loopwise.kernels.expert.fx_graph import call_arg, flip_dim, op_name
from loopwise.kernels.expert.partition.nodes import float_shape
from loopwise.kernels.expert.partition.records import RowOp

_SCANS = {"cumsum": "0.0", "cumprod": "1.0", "logcumsumexp": '-float("inf")', "cummax": '-float("inf")',
          "cummin": 'float("inf")'}
_VALUES_OF = ("cummax", "cummin")  # scans returning (values, indices): a part computes the values
_SOFTMAX_NEUTRAL = '-float("inf")'  # a softmax's first pass is a logsumexp


def row_calls(gm, taken=()) -> dict:
    """{node: its :class:`RowOp`} for each row operation of ``gm`` that a row part computes, in
    graph order, leaving out the nodes in ``taken`` (parts of another kind already)."""
    calls = {}
    for node in gm.graph.nodes:
        if node in taken or node.op not in ("call_function", "call_method", "call_module"):
            continue
        try:
            row = _row_op(gm, node)
        except (ew.Unsupported, KeyError, IndexError, TypeError):
            row = None  # options a row part does not read: the operation stays in PyTorch
        if row is not None:
            calls[node] = row
    return calls


def row_source(node):
    """(the tensor a row part's operation reads, the node that reads it): for ``torch.max(x,
    dim)[0]`` (or a cummax's values) the call reads it, for a reversed scan (the flip back, see
    :func:`_reversed`) the first flip, for the others the row node itself."""
    flipped = _reversed(node)
    if flipped is not None:
        return flipped[1].args[0], flipped[1]
    reader, _ = _picked(node)
    return reader.args[0], reader


def _reversed(node):
    """(the scan, the flip it reads) where ``node`` flips back a scan of a flip along the scan's one
    dimension (``flip(cumsum(flip(x, [d]), dim=d), [d])``, each flip read by nothing else): the
    reversed scan a row part computes in one pass; else None."""
    scan = node.args[0] if node.op in ("call_function", "call_method") and node.args else None
    if scan is None or not hasattr(scan, "op") or len(scan.users) != 1:
        return None
    call, pick = _picked(scan)
    if op_name(call) not in _SCANS or (pick is not None) != (op_name(call) in _VALUES_OF) or not call.args:
        return None
    inner = call.args[0]
    if not hasattr(inner, "op") or len(inner.users) != 1 or not inner.args:
        return None
    rank = len(float_shape(inner) or ())
    along = flip_dim(inner, inner.args[0], rank)
    dim = call_arg(call, "dim", 1)
    if along is None or flip_dim(node, scan, rank) != along or not _constant_dim(dim, rank) or dim % rank != along:
        return None
    return scan, inner


def _row_op(gm, node) -> RowOp | None:
    """What ``node`` computes as a row part, or None when it is no row operation."""
    flipped = _reversed(node)
    if flipped is not None:  # the flip back of a reversed scan: the part computes the three
        row = _plain_row_op(gm, flipped[0])
        return None if row is None else replace(row, reverse=True)
    if len(node.users) == 1 and _reversed(next(iter(node.users))) is not None:
        return None  # the scan of a reversed scan: its part is the flip back's
    return _plain_row_op(gm, node)


def _plain_row_op(gm, node) -> RowOp | None:
    call, pick = _picked(node)
    name = op_name(call) if call.op != "call_module" else ""
    if name in ("max", "min") and pick is not None:
        return _reduction(call, name if pick in (0, "values") else "arg" + name, name)
    if pick is None and name in REDUCTIONS:
        if name in ("max", "min") and (len(call.args) > 1 or call.kwargs):
            return None  # (values, indices) along a dimension, or the elementwise max of two tensors
        return _reduction(call, REDUCTIONS[name], name)  # torch.max(x): the whole tensor's
    src = _float_source(call)
    if src is None:
        return None
    rank = len(float_shape(src))
    if pick is None and softmax_dim(gm, node) is not None:
        given = dict(zip(("input", "dim", "_stacklevel", "dtype"), node.args)) | dict(node.kwargs)
        dim = softmax_dim(gm, node)
        if given.get("dtype") is not None or not _constant_dim(dim, rank) or float_shape(node) != float_shape(src):
            return None
        name = "log_softmax" if is_log_softmax(gm, node) else "softmax"
        return RowOp(name, dim % rank, dim % rank, neutral=_SOFTMAX_NEUTRAL)
    if name in _SCANS and (pick is not None) == (name in _VALUES_OF):
        dim = call_arg(call, "dim", 1)
        if set(call.kwargs) - {"dim"} or len(call.args) > 2 or not _constant_dim(dim, rank) \
                or float_shape(node) != float_shape(src):
            return None
        return RowOp(name, dim % rank, dim % rank, neutral=_SCANS[name], length=int(float_shape(src)[dim % rank]))
    return None


def _reduction(node, op: str, name: str) -> RowOp | None:
    """A reduction call's :class:`RowOp` (capture/reduce.py reads its options), or None."""
    src = _float_source(node)
    if src is None or node.op == "call_module" or any(k not in KEYWORDS.get(op, ("dim", "keepdim")) for k in node.kwargs):
        return None
    if op == "norm" and (node.kwargs.get("out") is not None or node.kwargs.get("dtype") is not None):
        return None
    rank = len(float_shape(src))
    dims, keepdim, correction = reduced_dims(node, op, rank, whole=True)
    first, last = dims[0], dims[-1]
    if op in ("argmax", "argmin") and first != last and dims != tuple(range(rank)):
        return None  # an index into one dimension, or into the whole tensor flattened
    apart = dims != tuple(range(first, last + 1))  # kept dimensions between reduced ones
    return RowOp(op, first, last, keepdim, correction, NEUTRAL[op], dims=dims if apart else (), rank=rank if apart else 0)


def _picked(node):
    """(call, pick) where ``node`` picks the values or the indices of ``torch.max(x, dim)`` /
    ``torch.min`` (``[0]``, ``.values``, ``[1]``, ``.indices``) or the values of a cummax / cummin,
    the call read by nothing else; else (node, None)."""
    if node.op != "call_function" or node.target not in (operator.getitem, getattr) or len(node.args) != 2:
        return node, None
    call, pick = node.args
    if getattr(call, "op", None) not in ("call_function", "call_method") or len(call.users) != 1:
        return node, None
    picks = (0, 1) if node.target is operator.getitem else ("values", "indices")
    if op_name(call) in ("max", "min") and pick in picks or op_name(call) in _VALUES_OF and pick == picks[0]:
        return call, pick
    return node, None


def _float_source(node):
    """The node's first argument when it is a float tensor of at least one dimension, else None."""
    src = node.args[0] if node.args else None
    shape = float_shape(src) if hasattr(src, "meta") else None
    return src if shape is not None and len(shape) >= 1 else None


def _constant_dim(dim, rank: int) -> bool:
    return isinstance(dim, int) and not isinstance(dim, bool) and -rank <= dim < rank
