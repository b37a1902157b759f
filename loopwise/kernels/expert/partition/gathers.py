"""Gathers, relabelings and permutes among a forward's operations: what a fused pass can read through.

A gather reads its table at positions an integer index tensor names: ``F.embedding`` /
``nn.Embedding`` (rows of a 2-D table), ``torch.index_select`` and ``x[idx]`` on one dimension (the
index's elements, or its shape, take that dimension's place) and ``torch.gather`` (one index per
output element, along one dimension). Every one of them maps a flat output position ``o`` to a flat
table position the same way: with ``inner`` the table's elements past the dimension, ``size`` its
length there and ``count`` the output's length there (the index's elements), the index value ``i``
read at ``(o // inner) % count`` (a ``select``) or at ``o`` itself (a ``gather``: the index has the
output's shape), the table is read at ``((o // (count * inner)) * size + i) * inner + o % inner``.

A relabeling (``flatten``, ``view``, ``reshape``, ``contiguous``) of a value a pass computes keeps
every element at its flat position: the pass reads through it at no cost, only the shape changes.
A permute (``permute``, ``transpose``, ``t``) moves elements: the pass reads its input at the
position each output coordinate names, one integer division per dimension.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

INDEX_DTYPES = ("int64", "int32")


@dataclass(frozen=True)
class Gather:
    """A gather node read as ``table`` at positions ``index`` names along ``dim`` of the table."""

    table: object  # the fx node of the table (an activation, a computed value or a get_attr)
    index: object  # the fx node of the integer index tensor
    dim: int  # of the table, made non-negative
    select: bool  # True: index_select / embedding / x[idx]; False: torch.gather (index of the output's shape)
    op: str  # the operation's name in a plan's listing


def _meta(node):
    return getattr(node, "meta", {}).get("tensor_meta") if hasattr(node, "meta") else None


def _dtype(node) -> str:
    meta = _meta(node)
    return str(meta.dtype).removeprefix("torch.") if meta is not None and hasattr(meta, "dtype") else ""


def _shape(node) -> tuple | None:
    meta = _meta(node)
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def gather_of(gm, node) -> tuple[Gather | None, str]:
    """(the gather ``node`` is, ""), or (None, why it is not one a pass reads through; "" where it
    is no gather at all)."""
    import torch
    import torch.nn.functional as F

    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if node.op == "call_module":
        sub = gm.get_submodule(node.target)
        if type(sub).__name__ == "Embedding":
            return None, ("" if sub.max_norm is None else
                          f"{node.target} is an Embedding with max_norm={sub.max_norm}, which renormalizes its table "
                          "in place on every lookup: it stays in PyTorch")
        return None, ""
    if node.op not in ("call_function", "call_method"):
        return None, ""
    args, kw = list(node.args), dict(node.kwargs)
    if node.target is F.embedding:
        given = dict(zip(("input", "weight", "padding_idx", "max_norm"), args)) | kw
        if given.get("max_norm") is not None:
            return None, "embedding with max_norm renormalizes its table in place on every lookup: it stays in PyTorch"
        return _checked(Gather(given.get("weight"), given.get("input"), 0, True, "embedding"))
    if name == "index_select" and (node.op == "call_method" or node.target is torch.index_select):
        given = dict(zip(("input", "dim", "index"), args)) | kw
        return _checked(_with_dim(given, True, "index_select"))
    if name == "gather" and (node.op == "call_method" or node.target is torch.gather):
        given = dict(zip(("input", "dim", "index"), args)) | kw
        if given.get("sparse_grad"):
            return None, ""
        return _checked(_with_dim(given, False, "gather"))
    if node.op == "call_function" and node.target is operator.getitem and len(args) == 2:
        return _checked(_advanced_index(args[0], args[1]))
    return None, ""


def _with_dim(given: dict, select: bool, op: str) -> Gather | None:
    table, dim = given.get("input"), given.get("dim")
    shape = _shape(table)
    if not isinstance(dim, int) or isinstance(dim, bool) or shape is None or not -len(shape) <= dim < len(shape):
        return None
    return Gather(table, given.get("index"), dim % len(shape), select, op)


def _advanced_index(table, index) -> Gather | None:
    """``x[idx]`` or ``x[:, idx]``: full slices, then one integer index tensor, then full slices."""
    parts = index if isinstance(index, tuple) else (index,)
    tensors = [p for p, part in enumerate(parts) if hasattr(part, "op")]
    if len(tensors) != 1 or any(part != slice(None) for p, part in enumerate(parts) if p != tensors[0]):
        return None
    return Gather(table, parts[tensors[0]], tensors[0], True, "index")


def _checked(found: Gather | None) -> tuple[Gather | None, str]:
    """``found`` where its table is a float tensor and its index an integer tensor of a shape the
    pass can read, else (None, why)."""
    from loopwise.kernels.expert import elementwise as ew

    if found is None or not hasattr(found.table, "op") or not hasattr(found.index, "op"):
        return None, ""
    table, index = _shape(found.table), _shape(found.index)
    if table is None or index is None or _meta(found.table).dtype not in ew.FLOAT_DTYPES:
        return None, ""
    if _dtype(found.index) not in INDEX_DTYPES:
        return None, f"{found.op} by a {_dtype(found.index) or 'non-tensor'} index stays in PyTorch"
    if found.op == "embedding" and len(table) != 2:
        return None, ""
    if found.op == "index_select" and len(index) > 1:
        return None, ""
    if not found.select and (len(index) != len(table)
                             or any(a != b for d, (a, b) in enumerate(zip(index, table)) if d != found.dim)):
        return None, (f"torch.gather with an index of shape {index} narrower than its input {table} off dimension "
                      f"{found.dim} stays in PyTorch")
    if found.dim >= len(table) or len(table) == 0:
        return None, ""
    return found, ""


def relabel_shape(node, source: str) -> str | None:
    """Python source of ``node``'s output shape from ``source``, its input's shape (a tuple), where
    ``node`` relabels its input (flatten, view, reshape with sizes given as numbers, contiguous);
    None for any other node."""
    import torch

    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    function = node.op == "call_function"
    rank = len(_shape(node.args[0])) if node.args and _shape(node.args[0]) is not None else None
    if rank is None:
        return None
    if name == "contiguous" and not function and len(node.args) == 1 and not node.kwargs:
        return source
    if name == "flatten" and (not function or node.target is torch.flatten):
        given = dict(zip(("input", "start_dim", "end_dim"), node.args)) | dict(node.kwargs)
        start, end = given.get("start_dim", 0), given.get("end_dim", -1)
        if not (isinstance(start, int) and isinstance(end, int)) or rank == 0:
            return None
        start, end = start % rank, end % rank
        return f"{source}[:{start}] + (math.prod({source}[{start}:{end + 1}]),) + {source}[{end + 1}:]"
    if name in ("view", "reshape") and (not function or node.target is torch.reshape):
        sizes = node.args[1:] if not function else node.args[1:2]
        sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)) else tuple(sizes)
        if node.kwargs or not sizes or not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
            return None
        if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
            return None
        if -1 not in sizes:
            return repr(tuple(sizes))
        known = math.prod(s for s in sizes if s != -1)
        if known == 0:
            return None
        return "(" + ", ".join(f"math.prod({source}) // {known}" if s == -1 else str(s) for s in sizes) + ",)"
    return None


def permutation_of(node) -> tuple[int, ...] | None:
    """The dimensions of its input that ``node``'s dimensions are (output dimension d is input
    dimension perm[d]) where ``node`` permutes them (permute, transpose, t), else None."""
    import torch

    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    function = node.op == "call_function"
    if node.op not in ("call_function", "call_method") or node.kwargs or not node.args:
        return None
    shape = _shape(node.args[0])
    if shape is None or not hasattr(node.args[0], "op"):
        return None
    rank = len(shape)
    rest = node.args[1:]
    if name == "permute" and (not function or node.target is torch.permute):
        dims = tuple(rest[0]) if len(rest) == 1 and isinstance(rest[0], (tuple, list)) else tuple(rest)
        if not all(isinstance(d, int) and -rank <= d < rank for d in dims) or len(dims) != rank:
            return None
        perm = tuple(d % rank for d in dims)
        return perm if sorted(perm) == list(range(rank)) else None
    if name in ("transpose", "swapaxes") and (not function or node.target in (torch.transpose, torch.swapaxes)):
        if len(rest) != 2 or not all(isinstance(d, int) and -rank <= d < rank for d in rest):
            return None
        perm = list(range(rank))
        a, b = rest[0] % rank, rest[1] % rank
        perm[a], perm[b] = perm[b], perm[a]
        return tuple(perm)
    if name == "t" and not function and not rest and rank <= 2:
        return tuple(reversed(range(rank)))
    return None


def copied_permutes(cone) -> set:
    """The permutes among ``cone`` that a relabeling in it copies (PyTorch's copy kernel, which the
    pass does in its loads): the nearest permute behind each relabeling, through other views. A
    permute nothing in the pass copies is read through at no saving (PyTorch's elementwise kernels
    read a permuted view as it is)."""
    found = set()
    for node in cone:
        if relabel_shape(node, "s") is None:
            continue
        source = node.args[0]
        while source in cone and permutation_of(source) is None and relabel_shape(source, "s") is not None:
            source = source.args[0]
        if source in cone and permutation_of(source) is not None:
            found.add(source)
    return found
