"""Slices and concatenations among a forward's operations: what a fused pass can read through.

A slice (``torch.narrow``, and each piece of ``chunk`` / ``split``, which :func:`pieces_as_narrows`
writes as narrows) keeps the elements ``start``..``start + length`` of one dimension: a pass reads
its input at the same coordinates, that one shifted by ``start``. A concatenation (``torch.cat``)
stacks its pieces along one dimension: a pass reads each output position from the piece whose run
of that dimension holds it, at the coordinate less the run's start; every piece is read at a
position of its own (clamped to 0 outside its run, so no load leaves it) and the value picked.
"""

from __future__ import annotations

import operator


def _meta(node):
    return getattr(node, "meta", {}).get("tensor_meta") if hasattr(node, "meta") else None


def _float_rank(node) -> int | None:
    """The rank of ``node``'s output when it is one float tensor, else None."""
    import torch

    meta = _meta(node)
    if meta is None or not hasattr(meta, "dtype") or meta.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return None
    return len(meta.shape)


def narrow_of(node) -> tuple[int, int] | None:
    """(dimension, start) where ``node`` is ``torch.narrow`` / ``Tensor.narrow`` of a float tensor
    with numbers for its dimension, start (made non-negative) and length (at least 1), else None."""
    import torch

    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if name != "narrow" or node.kwargs or len(node.args) != 4 or (node.op == "call_function" and node.target is not torch.narrow):
        return None
    source, dim, start, length = node.args
    rank = _float_rank(source)
    if rank is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in (dim, start, length)) \
            or not -rank <= dim < rank or length <= 0:
        return None  # an empty piece: its index would divide by its zero length
    size = _meta(source).shape[dim]
    return dim % rank, start % size if start < 0 else start


def cat_of(node) -> tuple[list, int] | None:
    """(pieces, dimension made non-negative) where ``node`` is ``torch.cat`` / ``torch.concat`` of
    float tensors of one dtype and rank, none of them empty, else None."""
    import torch

    if node.op != "call_function" or node.target not in (torch.cat, torch.concat, torch.concatenate):
        return None
    given = dict(zip(("tensors", "dim"), node.args)) | dict(node.kwargs)
    pieces, dim = given.get("tensors"), given.get("dim", 0)
    if set(given) - {"tensors", "dim"} or not isinstance(pieces, (list, tuple)) or not pieces or not isinstance(dim, int):
        return None
    ranks = {_float_rank(p) for p in pieces}
    dtypes = {_meta(p).dtype for p in pieces if _meta(p) is not None}
    if len(ranks) != 1 or None in ranks or len(dtypes) != 1 or not -min(ranks) <= dim < min(ranks) \
            or any(0 in _meta(p).shape for p in pieces):
        return None  # an empty piece has no element to read, even at 0
    return list(pieces), dim % min(ranks)


def pieces_as_narrows(gm) -> None:
    """Each piece ``chunk(x, n, dim)[i]`` / ``split(x, size, dim)[i]`` (function or method) of a
    float tensor, and each basic slice ``x[:, a:b]`` / ``x[..., :k]`` (one dimension sliced, step
    1), written as ``torch.narrow(x, dim, start, length)``, the same view, with start and length
    read off the shapes the pieces were propagated with; the call and its pickers go where nothing
    else reads the call."""
    import torch

    for node in list(gm.graph.nodes):
        found = basic_slice(node)
        if found is not None:
            with gm.graph.inserting_before(node):
                piece = gm.graph.call_function(torch.narrow, (node.args[0], *found))
            piece.meta = dict(node.meta)
            node.replace_all_uses_with(piece)
            gm.graph.erase_node(node)
    for call in list(gm.graph.nodes):
        name = call.target if call.op == "call_method" else getattr(call.target, "__name__", "")
        if name not in ("chunk", "split") or call.op not in ("call_function", "call_method"):
            continue
        if call.op == "call_function" and call.target not in (torch.chunk, torch.split, torch.functional.split):
            continue
        dim = call.kwargs.get("dim", call.args[2] if len(call.args) > 2 else 0)
        metas, source = _meta(call), call.args[0] if call.args else None
        rank = _float_rank(source)
        if rank is None or not isinstance(dim, int) or not -rank <= dim < rank or not isinstance(metas, (tuple, list)):
            continue
        dim %= rank
        users = list(call.users)
        if not all(u.op == "call_function" and u.target is operator.getitem and isinstance(u.args[1], int) for u in users):
            continue
        starts = [sum(m.shape[dim] for m in metas[:i]) for i in range(len(metas))]
        for user in users:
            i = user.args[1] % len(metas)
            with gm.graph.inserting_before(user):
                piece = gm.graph.call_function(torch.narrow, (source, dim, starts[i], metas[i].shape[dim]))
            piece.meta = dict(user.meta)
            user.replace_all_uses_with(piece)
            gm.graph.erase_node(user)
        gm.graph.erase_node(call)


def basic_slice(node) -> tuple[int, int, int] | None:
    """(dimension, start, length) where ``node`` is ``x[...]`` of a float tensor with full slices
    (or one Ellipsis standing for them) but in one dimension, sliced by numbers with step 1."""
    if node.op != "call_function" or node.target is not operator.getitem or len(node.args) != 2:
        return None
    source, index = node.args
    rank, meta = _float_rank(source), _meta(node)
    parts = index if isinstance(index, tuple) else (index,)
    if rank is None or meta is None or not all(isinstance(p, slice) or p is Ellipsis for p in parts) \
            or sum(p is Ellipsis for p in parts) > 1 or len(parts) - (Ellipsis in parts) > rank:
        return None
    if Ellipsis in parts:
        at = parts.index(Ellipsis)
        parts = parts[:at] + (slice(None),) * (rank - len(parts) + 1) + parts[at + 1:]
    cut = [d for d, p in enumerate(parts) if p != slice(None)]
    if len(cut) != 1 or parts[cut[0]].step not in (None, 1):
        return None
    dim, given = cut[0], parts[cut[0]]
    if not all(v is None or isinstance(v, int) and not isinstance(v, bool) for v in (given.start, given.stop)):
        return None
    start, _, _ = given.indices(_meta(source).shape[dim])
    length = meta.shape[dim]
    return (dim, start, length) if length > 0 else None
