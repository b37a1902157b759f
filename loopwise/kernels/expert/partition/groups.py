"""Fusible elementwise operations and the connected groups they form, each output one Triton pass."""

from __future__ import annotations

import math

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.expressions import check_operand, expression
from loopwise.kernels.expert.partition.gathers import INDEX_DTYPES, copied_permutes, gather_of, permutation_of, relabel_shape
from loopwise.kernels.expert.partition.indexed import indexed_pass
from loopwise.kernels.expert.partition.offsets import pass_wide
from loopwise.kernels.expert.partition.nodes import (arg_nodes, broadcasts, dtype_name, float_shape, operand_dtypes,
                                                     statements)
from loopwise.kernels.expert.partition.records import MIN_OPS, Group
from loopwise.kernels.expert.partition.slices import cat_of, narrow_of, pieces_as_narrows
from loopwise.kernels.expert.functionalize import writes_in_place as in_place
from loopwise.kernels.expert.partition.writes import late_writes, private_in_place


def fusible(gm, model, node) -> bool:
    """Whether ``node`` can be one statement of a fused pass."""
    if node.op not in ("call_function", "call_method", "call_module") or (
            in_place(gm, node) and not private_in_place(gm, node)):
        return False
    shape = float_shape(node)
    if shape is None:
        return False
    exprs = {}
    for arg in arg_nodes(node):
        if arg.op == "get_attr":
            try:
                check_operand(model, arg.target, shape)
            except ew.Unsupported:
                return False
        elif float_shape(arg) != shape and not broadcasts(arg, shape):
            return False
        exprs[arg.name] = "a"
    try:
        expression(gm, node, exprs)
    except (ew.Unsupported, KeyError, IndexError, TypeError, ValueError):
        return False
    return True


def find_groups(gm, model, min_ops: int = MIN_OPS) -> tuple[list[Group], list]:
    """The fused groups of at least ``min_ops`` operations (or fewer where the group is the whole
    forward), and for each its output node, its inputs (activation and integer index nodes, then
    get_attr nodes) and its nodes, in the graph's order. A gather joins the group of the work on its
    table where that work is read by nothing else and is computed at most :data:`REPEAT` times per
    table element (:mod:`gathers`); a relabeling (flatten, view) joins the group it relabels."""
    embeddings_as_functions(gm)
    pieces_as_narrows(gm)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    member, gathers, broadcast = _members(gm, model)
    cut = {(node, g.table) for node, g in gathers.items()
           if g.table in member and not _private_table(node, g.table, member)
           or _numel(node) > REPEAT * _numel(g.table)}
    parent = {n: n for n in member}

    def root(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in member:
        for arg in arg_nodes(n):
            if arg in member and (n, arg) not in cut and (n, arg) not in broadcast:
                parent[root(arg)] = root(n)
    components: dict = {}
    for n in sorted(member, key=order.__getitem__):
        components.setdefault(root(n), []).append(n)
    groups, outputs = [], []
    for nodes in components.values():
        for group, output in _component_groups(gm, model, nodes, cut, broadcast, gathers, order, min_ops):
            groups.append(group)
            outputs.append(output)
    keep = sorted(range(len(groups)), key=lambda i: order[outputs[i][0]])
    return [groups[i] for i in keep], [outputs[i] for i in keep]


REPEAT = 4  # the most times a gather may compute its table's elementwise work per table element


def _members(gm, model) -> tuple[set, dict, set]:
    """The nodes a fused pass can compute: elementwise operations, gathers of float tables by
    integer indices, relabelings of what a pass computes; the gathers among them; and the
    (operation, value) edges along which an elementwise operation reads a smaller value of the
    forward broadcast (a statistic kept as 1), which a pass loads by its broadcast index, as a
    model tensor, and which a pass of its own shape computes."""
    member, gathers, relabels, broadcast = set(), {}, set(), set()
    written, order = late_writes(gm), {n: i for i, n in enumerate(gm.graph.nodes)}
    for n in gm.graph.nodes:
        if any(written.get(a, -1) > order[n] for a in arg_nodes(n)):
            continue  # it reads memory written in place later on: its reads stay where PyTorch makes them
        if any(order[u] > written.get(n, len(order)) for u in n.users):
            continue  # read after a write to its own memory: a pass there would compute it again, not read it written
        if fusible(gm, model, n):
            member.add(n)
            broadcast.update((n, a) for a in arg_nodes(n) if a.op != "get_attr" and float_shape(a) != float_shape(n))
        elif n.op in ("call_function", "call_method") and float_shape(n) is not None:
            found, _ = gather_of(gm, n)
            if found is not None:
                gathers[n] = found
                member.add(n)
            elif _index_map(n, (member, relabels)) and not any(  # a write through an alias
                    in_place(gm, u) for u in (*n.users, *(u for a in arg_nodes(n) for u in a.users))):
                relabels.add(n)
    # a view only between operations of a pass: one at its end stays a view in PyTorch, so the pass
    # ends with an operation (and can still be a GEMM's epilogue or a norm's prologue); but a
    # relabeling of a permuted value, or a concatenation, is PyTorch's copy kernel, which the pass's
    # store can be
    for n in reversed(list(gm.graph.nodes)):
        if n in relabels and (cat_of(n) is not None or any(u in member for u in n.users)
                              or relabel_shape(n, "s") is not None and _copies_a_permute(n, relabels)):
            member.add(n)
    return member, gathers, broadcast


def _index_map(node, computed) -> bool:
    """Whether a pass can read through ``node``: a relabeling of a value in one of the sets
    ``computed``, a permute, a slice or a concatenation of float tensors."""
    return (relabel_shape(node, "s") is not None and any(node.args[0] in nodes for nodes in computed)
            or permutation_of(node) is not None and float_shape(node.args[0]) is not None
            or narrow_of(node) is not None or cat_of(node) is not None)


def _copies_a_permute(node, views) -> bool:
    """Whether ``node`` relabels (so copies, in PyTorch) a permutation, through other views."""
    if permutation_of(node) is not None:
        return False
    source = node.args[0]
    while source in views:
        if permutation_of(source) is not None:
            return True
        source = source.args[0]
    return False


def _numel(node) -> int:
    return math.prod(node.meta["tensor_meta"].shape)


def _private_table(gather, table, member) -> bool:
    """Whether the work computing ``table`` (the members it is computed from) is read by nothing
    but itself and ``gather``: only then can the gather compute it at the positions it reads."""
    seen, stack = set(), [table]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(a for a in arg_nodes(node) if a in member)
    return all(user in seen or user is gather for node in seen for user in node.users)


def covers_forward(gm, cone) -> bool:
    """Whether the pass computing ``cone`` is the whole forward: every call but relabelings in it."""
    return all(n in cone or relabel_shape(n, "s") is not None or permutation_of(n) is not None or narrow_of(n) is not None
               for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def gather_refusals(gm) -> list[str]:
    """Why each gather of the forward that no pass reads through stays in PyTorch (where it says)."""
    return [why for why in (gather_of(gm, n)[1] for n in gm.graph.nodes) if why]


def embeddings_as_functions(gm) -> None:
    """Each nn.Embedding call (without max_norm) on an integer index written as
    ``F.embedding(index, <module>.weight)``, the same lookup, so the table is a node a pass reads."""
    import torch.nn.functional as F
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    for node in list(gm.graph.nodes):
        if node.op != "call_module" or type(gm.get_submodule(node.target)).__name__ != "Embedding":
            continue
        sub = gm.get_submodule(node.target)
        if sub.max_norm is not None or len(node.args) != 1 or node.kwargs or "tensor_meta" not in node.meta:
            continue
        with gm.graph.inserting_before(node):
            weight = gm.graph.get_attr(f"{node.target}.weight")
            weight.meta["tensor_meta"] = _extract_tensor_metadata(sub.weight)
            lookup = gm.graph.call_function(F.embedding, (node.args[0], weight))
        lookup.meta = dict(node.meta)
        node.replace_all_uses_with(lookup)
        gm.graph.erase_node(node)


def _path(p) -> str:
    """A broadcast tensor's name in a pass's docstring: the model's attribute path, or the value's own."""
    return p.target if p.op == "get_attr" else p.name


def _component_groups(gm, model, nodes, cut, broadcast, gathers, order, min_ops):
    """The groups of one connected component ``nodes``: one per value read outside it (``broadcast``:
    the edges read broadcast, see :func:`_members`)."""
    inside = set(nodes)
    # a half-precision value read outside the group exists there rounded to its dtype: a pass
    # that needs it loads that value (recomputed unrounded, it would not cancel against what was
    # computed from the rounded one, as cumsum(a) - a must)
    shared = {n for n in nodes if dtype_name(n) != "float32" and any(u not in inside for u in n.users)}
    for out in nodes:
        if all(user in inside and (user, out) not in cut for user in out.users):
            continue  # read only inside the group: not an output
        cone, stack = set(), [out]
        while stack:
            current = stack.pop()
            if current in cone:
                continue
            cone.add(current)
            stack.extend(a for a in arg_nodes(current) if a in inside and a not in shared and (current, a) not in cut
                         and (current, a) not in broadcast)
        ordered = sorted(cone, key=order.__getitem__)
        relabels = [n for n in ordered if n not in gathers and relabel_shape(n, "s") is not None]
        narrows = [n for n in ordered if narrow_of(n) is not None]
        indexed = relabels + narrows + [n for n in ordered if n in gathers or permutation_of(n) is not None
                                        or cat_of(n) is not None]
        permutes = [n for n in ordered if permutation_of(n) is not None]
        ops = len(cone) - len(relabels) - len(narrows) - len(set(permutes) - copied_permutes(cone))
        if ops < min_ops and not covers_forward(gm, cone) or ops == 0:
            continue
        xs, ps = [], []
        for node in ordered:
            for arg in arg_nodes(node):
                if arg in cone and (node, arg) not in cut and (node, arg) not in broadcast:
                    continue
                bucket = ps if arg.op == "get_attr" or (node, arg) in broadcast else xs
                if arg not in bucket:
                    bucket.append(arg)
        if not xs:
            continue  # computed from the model's tensors alone: its shape is theirs
        wide = pass_wide(n.meta["tensor_meta"].shape for n in (out, *xs, *ordered)
                         if hasattr(n.meta.get("tensor_meta"), "shape"))
        dtypes = {dtype_name(n) for n in (out, *xs)} | set(operand_dtypes(model, ps))
        dtypes -= set(INDEX_DTYPES)  # an index is read as an integer, never upcast
        upcast = dtypes != {"float32"}
        if not indexed:
            body, ops, expr = statements(
                gm, ordered, {x.name: f"x{i}" for i, x in enumerate(xs)} | {p.name: f"p{j}" for j, p in enumerate(ps)}, out)
            yield (Group(len(xs), tuple(_path(p) for p in ps), body, expr, ops, upcast=upcast, out_dtype=dtype_name(out), wide=wide),
                   (out, xs, ps, ordered))
            continue
        try:
            fields = indexed_pass(ordered, out, xs, ps, cut, gathers, upcast, gm)
        except ew.Unsupported:
            continue  # left to PyTorch: a value read at two sets of positions, a shape not found
        yield (Group(len(xs), tuple(_path(p) for p in ps), upcast=upcast, out_dtype=dtype_name(out), wide=wide, **fields),
               (out, xs, ps, ordered))
