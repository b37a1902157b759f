"""Row operations of a partitioned forward: a softmax, log-softmax, reduction or scan along one
dimension (or, for a reduction that takes several, any set of them, all of them when it names
none) of a float tensor, at any position of the forward and over any dimension (leading,
middle or last), of any length (a long one split among programs: templates/_rowop.j2). Each becomes one
Triton part of the ``graph_norm`` plan (kind ``row`` of :class:`~.records.Norm`), the elementwise
work only it reads computed as it is read and the work only its output feeds applied before the
store, as the norms' parts do (:func:`~.norms.norm_passes`)."""

from __future__ import annotations

import math
import operator
from dataclasses import replace

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.capture.reduce import KEYWORDS, NEUTRAL, REDUCTIONS, reduced_dims
from loopwise.kernels.expert.capture.softmax import is_log_softmax, softmax_dim
from loopwise.kernels.expert.fx_graph import call_arg, flip_dim, op_name
from loopwise.kernels.expert.partition.nodes import arg_nodes, float_shape
from loopwise.kernels.expert.partition.records import RowOp
from loopwise.kernels.expert.partition.slices import basic_slice, cat_of

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
    """(the tensor a row part's operation reads, the set of nodes that read it there, the work
    between them that the part does itself): for ``torch.max(x, dim)[0]`` (or a cummax's values)
    the call, for a reversed scan (the flip back, see :func:`_reversed`) the first flip, for an
    exclusive scan (:func:`_shifted`) the slices and sizes of its shifted input, for the others
    the row node itself."""
    flipped = _reversed(node)
    if flipped is not None:
        return flipped[1].args[0], {flipped[1]}, {flipped[1]}
    reader, _ = _picked(node)
    shifted = _shifted(reader)
    if shifted is not None:
        return shifted
    return reader.args[0], {reader}, set()


_FILLS = {"ones_like": 1.0, "zeros_like": 0.0, "full_like": None}  # full_like: its value argument
_NEUTRAL_VALUES = {"cumsum": 0.0, "cumprod": 1.0, "logcumsumexp": -math.inf, "cummax": -math.inf, "cummin": math.inf}


def _shifted(call):
    """(f, the nodes that read f to shift it, the nodes that shift it) where the scan ``call`` reads
    f shifted one entry along its dimension d, the scan's neutral value first: ``cat([fill,
    f[..., :-1]], d)`` (``fill`` a ``ones_like`` / ``zeros_like`` / ``full_like`` of a one-entry
    slice of f) or ``F.pad(f[..., :-1], one entry before d, value)``, the slices ``narrow``s or
    basic slices, the work that shifts f read by nothing else: the exclusive scan, which a row
    part computes by reading entry r - 1 at r. Else None."""
    name = op_name(call)
    inp = call.args[0] if call.op in ("call_function", "call_method") and call.args else None
    if name not in _NEUTRAL_VALUES or not hasattr(inp, "op") or len(inp.users) != 1:
        return None
    shape = float_shape(inp)
    dim = call_arg(call, "dim", 1)
    if shape is None or not _constant_dim(dim, len(shape)):
        return None
    dim %= len(shape)
    rest, value = _shift_pieces(inp, dim, len(shape))
    if rest is None or value != _NEUTRAL_VALUES[name]:
        return None
    f, along, start, length = _slice(rest) or (None, None, None, None)
    if f is None or float_shape(f) != shape or along != dim or start != 0 or length != shape[dim] - 1:
        return None
    work, stack = set(), [inp]  # what computes the shifted tensor from f (its slices, its sizes)
    while stack:
        node = stack.pop()
        if node is f or node in work:
            continue
        if node.op in ("placeholder", "get_attr", "output"):
            return None  # it reads another tensor
        work.add(node)
        stack.extend(arg_nodes(node))
    if any(u not in work and u is not call for n in work for u in n.users):
        return None
    return f, {u for u in f.users if u in work}, work


def _shift_pieces(inp, dim: int, rank: int):
    """(the shifted piece, the value put before it) where ``inp`` puts one entry before a piece along
    ``dim`` (see :func:`_shifted`); else (None, None)."""
    import torch

    found = cat_of(inp) if inp.op == "call_function" else None
    if found is not None:
        pieces, along = found
        if along != dim or len(pieces) != 2:
            return None, None
        fill, rest = pieces
        name = op_name(fill)
        if fill.op not in ("call_function", "call_method") or name not in _FILLS or float_shape(fill) is None \
                or float_shape(fill)[dim] != 1 or set(fill.kwargs) - {"dtype", "device"}:
            return None, None
        value = _FILLS[name] if name != "full_like" else (fill.args[1] if len(fill.args) == 2 else None)
        source, shifted = _slice(fill.args[0]) if fill.args else None, _slice(rest)
        if source is None or shifted is None or source[0] is not shifted[0]:
            return None, None  # its shape read from another tensor than the shifted one
        return rest, float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if inp.op == "call_function" and inp.target is torch.nn.functional.pad and len(inp.args) == 2 \
            and set(inp.kwargs) <= {"mode", "value"} and inp.kwargs.get("mode", "constant") == "constant":
        rest, pad = inp.args
        before = [0] * (2 * rank)
        before[2 * (rank - 1 - dim)] = 1  # F.pad lists the last dimension's amounts first
        if not isinstance(pad, (tuple, list)) or list(pad) + [0] * (2 * rank - len(pad)) != before:
            return None, None
        value = inp.kwargs.get("value")
        value = 0.0 if value is None else value
        return rest, float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return None, None


def _slice(node):
    """(source, dimension, start, length) where ``node`` slices one dimension of a float tensor with
    step 1 (``narrow``, its length maybe computed from sizes, or ``x[:, a:b]``), from the shapes
    propagated; else None."""
    if not hasattr(node, "op"):
        return None
    if node.op in ("call_function", "call_method") and op_name(node) == "narrow" and len(node.args) == 4 \
            and not node.kwargs:
        source, dim, start = node.args[:3]
        shape, out = float_shape(source) if hasattr(source, "op") else None, float_shape(node)
        if shape is None or out is None or not _constant_dim(dim, len(shape)) or not isinstance(start, int) \
                or isinstance(start, bool):
            return None
        dim %= len(shape)
        return source, dim, start % shape[dim] if start < 0 else start, out[dim]
    found = basic_slice(node)
    return None if found is None else (node.args[0], *found)


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
    row = _plain_row_op(gm, node)
    if row is not None and row.scans and _shifted(_picked(node)[0]) is not None:
        return replace(row, exclusive=True)
    return row


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
