"""Fusible elementwise operations and the connected groups they form, each output one Triton pass."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.expressions import check_operand, expression
from loopwise.kernels.expert.partition.nodes import arg_nodes, dtype_name, float_shape, operand_dtypes, statements
from loopwise.kernels.expert.partition.records import MIN_OPS, Group


def _in_place(gm, node) -> bool:
    if node.kwargs.get("inplace") or (node.op == "call_method" and str(node.target).endswith("_")):
        return True
    return node.op == "call_module" and bool(getattr(gm.get_submodule(node.target), "inplace", False))


# Modules whose output is a fresh tensor (never a view of their input or of a parameter).
_FRESH_OUTPUT = ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Linear",
                 "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "LayerNorm", "InstanceNorm2d")


def _private_in_place(gm, node) -> bool:
    """An in-place module or function call (``nn.ReLU(inplace=True)``) whose input is a fresh module
    output read by nothing else: no one can see the write, so computing it out of place is the
    same program (VGG's and ResNet's ReLUs after a convolution or a norm)."""
    if node.op not in ("call_module", "call_function") or not node.args:
        return False
    src = node.args[0]
    return (getattr(src, "op", None) == "call_module" and len(src.users) == 1
            and type(gm.get_submodule(src.target)).__name__ in _FRESH_OUTPUT)


def _fusible(gm, model, node) -> bool:
    """Whether ``node`` can be one statement of a fused pass."""
    if node.op not in ("call_function", "call_method", "call_module") or (
            _in_place(gm, node) and not _private_in_place(gm, node)):
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
        elif float_shape(arg) != shape:
            return False
        exprs[arg.name] = "a"
    try:
        expression(gm, node, exprs)
    except (ew.Unsupported, KeyError, IndexError, TypeError, ValueError):
        return False
    return True


def find_groups(gm, model, min_ops: int = MIN_OPS) -> tuple[list[Group], list]:
    """The fused groups of at least ``min_ops`` operations, and for each its output node, its
    inputs (activation nodes, then get_attr nodes) and its nodes, in the graph's order."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    fusible = [n for n in gm.graph.nodes if _fusible(gm, model, n)]
    member = set(fusible)
    parent = {n: n for n in fusible}

    def root(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in fusible:
        for arg in arg_nodes(n):
            if arg in member:
                parent[root(arg)] = root(n)
    components: dict = {}
    for n in fusible:
        components.setdefault(root(n), []).append(n)
    groups, outputs = [], []
    for nodes in components.values():
        inside = set(nodes)
        # a half-precision value read outside the group exists there rounded to its dtype: a pass
        # that needs it loads that value (recomputed unrounded, it would not cancel against what was
        # computed from the rounded one, as cumsum(a) - a must)
        shared = {n for n in nodes if dtype_name(n) != "float32" and any(u not in inside for u in n.users)}
        for out in nodes:
            if all(user in inside for user in out.users):
                continue  # read only inside the group: not an output
            cone, stack = set(), [out]
            while stack:
                current = stack.pop()
                if current in cone:
                    continue
                cone.add(current)
                stack.extend(a for a in arg_nodes(current) if a in inside and a not in shared)
            if len(cone) < min_ops:
                continue
            ordered = sorted(cone, key=order.__getitem__)
            xs, ps = [], []
            for node in ordered:
                for arg in arg_nodes(node):
                    if arg in cone:
                        continue
                    bucket = ps if arg.op == "get_attr" else xs
                    if arg not in bucket:
                        bucket.append(arg)
            if not xs:
                continue  # computed from the model's tensors alone: its shape is theirs
            body, ops, expr = statements(
                gm, ordered, {x.name: f"x{i}" for i, x in enumerate(xs)} | {p.name: f"p{j}" for j, p in enumerate(ps)}, out)
            dtypes = {dtype_name(n) for n in (out, *xs)} | set(operand_dtypes(model, ps))
            groups.append(Group(len(xs), tuple(p.target for p in ps), body, expr, ops,
                                upcast=dtypes != {"float32"}, out_dtype=dtype_name(out)))
            outputs.append((out, xs, ps, ordered))
    keep = sorted(range(len(groups)), key=lambda i: order[outputs[i][0]])
    return [groups[i] for i in keep], [outputs[i] for i in keep]

