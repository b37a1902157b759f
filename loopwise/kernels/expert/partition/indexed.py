"""A fused pass that reads through gathers, relabelings and permutes: where each of its values is read.

The pass walks its output's flat positions (``offsets``). Every value it computes is computed at
the positions of one *context*: an index variable (a flat position in some tensor) and the shape
the value has there. An elementwise operation computes its inputs in its own context; a relabeling
(flatten, view, reshape) keeps the index variable and changes the shape; a gather reads its table in
a new context, whose index variable it computes from its integer index, and a permute its input,
whose index variable it computes from the output's coordinates (see :mod:`gathers`). The
pass's inputs are loaded once per context that reads them: a tensor of the context's shape at the
index variable itself, a model tensor of another shape through its broadcast index against the
context's shape.

The launcher finds every context's shape from the tensors it is given, as PyTorch would: a tensor
of that shape, a relabeling of a known shape, or a gather's output shape from its table's and its
index's; the gathers' sizes and the broadcast indices follow from those shapes.
"""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.expressions import expression
from loopwise.kernels.expert.partition.gathers import copied_permutes, permutation_of, relabel_shape
from loopwise.kernels.expert.partition.nodes import arg_nodes
from loopwise.kernels.expert.partition.slices import cat_of, narrow_of


def _shape(node) -> tuple:
    return tuple(node.meta["tensor_meta"].shape)


class _Contexts:
    """The contexts of one pass: (index variable, shape) pairs, numbered as they are met."""

    def __init__(self, root_shape: tuple) -> None:
        self.keys = [("offsets", root_shape)]
        self.of: dict = {}  # node computed in the pass -> the numbers of the contexts it is computed in

    def number(self, var: str, shape: tuple) -> int:
        if (var, shape) not in self.keys:
            self.keys.append((var, shape))
        return self.keys.index((var, shape))

    def assign(self, node, c: int) -> None:
        """``node`` computed in context ``c`` too (a value read at two sets of positions, as two
        pieces of a cat read one tensor, is computed at each: elementwise work costs less than a
        pass over memory)."""
        if c not in self.of.setdefault(node, []):
            if len(self.of[node]) >= _MOST_CONTEXTS:
                raise ew.Unsupported(f"{node.name} is read at more than {_MOST_CONTEXTS} sets of positions in one pass")
            self.of[node].append(c)


_MOST_CONTEXTS = 8  # the most sets of positions one value of a pass is computed at


def indexed_pass(cone, out, xs, ps, cut, gathers: dict, upcast: bool, gm) -> dict:
    """The Group fields of the pass computing ``out`` from the nodes ``cone`` (graph order), its
    inputs ``xs`` (activations and integer indices) and ``ps`` (get_attr nodes): ``prelude``
    (the index arithmetic and the loads), ``body``, ``expr``, ``ops``, ``sizes`` (the launcher's
    statements computing ``shape``, the output's, and ``int_args``) and ``int_args``.

    Args:
        cut: (gather, table) edges along which the table is read from memory, not computed here.
        gathers: every gather node of the cone with its :class:`~gathers.Gather`.

    Raises:
        ew.Unsupported: a value read in too many contexts, or a context whose shape the launcher
            cannot find.
    """
    members = set(cone)
    names = {x: f"x{i}" for i, x in enumerate(xs)} | {p: f"p{j}" for j, p in enumerate(ps)}
    ctx = _Contexts(_shape(out))
    ctx.assign(out, 0)
    leaves: dict = {}  # (leaf node, context) -> the variable it is loaded into
    # each keyed by (node, the context it is computed in):
    index_lines, gather_ctx = [], {}  # a gather -> (number k, its table's context, its own context)
    permute_ctx = {}  # a permute -> (number k, its input's context, its own context, the permutation)
    slice_ctx = {}  # a narrow -> (k, its input's context, its own, dim); a cat -> (k, its pieces' contexts, its own, dim)

    def read(node, arg, c: int) -> None:
        if arg in members and (node, arg) not in cut:
            ctx.assign(arg, c)
        else:
            leaves.setdefault((arg, c), f"{names[arg]}_c{c}" if c else names[arg])

    for node, c in _computed(cone, ctx):  # users before what they read: each node's contexts are known when met
        var = ctx.keys[c][0]
        if node in gathers:
            g, k = gathers[node], len(gather_ctx)
            t = ctx.number(f"o{k}", _shape(g.table))
            gather_ctx[(node, c)] = (k, t, c)
            read(node, g.table, t)
            at = f"({var} // g{k}_inner) % g{k}_count" if g.select else var
            index_lines += [f"i{k} = tl.load({names[g.index]}_ptr + {at}, mask=mask, other=0).to(tl.int64)",
                            f"i{k} = tl.where(i{k} < 0, i{k} + g{k}_size, i{k})  # a negative index counts from the end",
                            f"o{k} = (({var} // g{k}_span) * g{k}_size + i{k}) * g{k}_inner + {var} % g{k}_inner"
                            f"  # {g.op} along dim {g.dim}"]
        elif permutation_of(node) is not None:
            perm, k = permutation_of(node), len(permute_ctx)
            source = ctx.number(f"q{k}", _shape(node.args[0]))
            permute_ctx[(node, c)] = (k, source, c, perm)
            read(node, node.args[0], source)
            index_lines.append(" + ".join(f"(({var} // q{k}_s{d}) % q{k}_n{d}) * q{k}_t{d}" for d in range(len(perm)))
                               .join((f"q{k} = ", f"  # permute {perm}")))
        elif narrow_of(node) is not None or cat_of(node) is not None:
            index_lines += _slice_lines(node, var, c, len(slice_ctx), ctx, slice_ctx, read)
        elif relabel_shape(node, "s") is not None:
            read(node, node.args[0], ctx.number(var, _shape(node.args[0])))
        else:
            for arg in arg_nodes(node):
                read(node, arg, c)
    shapes, sizes = _context_shapes(ctx, leaves, gathers, gather_ctx, permute_ctx | slice_ctx, names, cone)
    int_args, loads = [], []
    up = ".to(tl.float32)" if upcast else ""
    for (leaf, c), var in leaves.items():
        index = ctx.keys[c][0]
        if _shape(leaf) == ctx.keys[c][1]:
            loads.append(f"{var} = tl.load({names[leaf]}_ptr + {index}, mask=mask, other=0.0){up}")
        elif leaf in ps:  # a model tensor (or a smaller value of the forward) broadcast against the context's shape
            div, mod = f"{names[leaf]}_div{c}", f"{names[leaf]}_mod{c}"
            sizes.append(f"{div}, {mod} = broadcast_index(s{c}, {names[leaf]}.shape)")
            int_args += [div, mod]
            loads.append(f"{var} = tl.load({names[leaf]}_ptr + ({index} // {div}) % {mod}, mask=mask, other=0.0){up}")
        else:
            raise ew.Unsupported(f"{leaf.name} of shape {_shape(leaf)} is read where the pass computes shape "
                                 f"{ctx.keys[c][1]}")
    for k, t, _ in gather_ctx.values():
        int_args += [f"g{k}_span", f"g{k}_size", f"g{k}_inner", f"g{k}_count"]
    for k, _, _, perm in permute_ctx.values():
        int_args += [f"q{k}_{v}{d}" for d in range(len(perm)) for v in "snt"]
    for (node, _), (k, t, _, _) in slice_ctx.items():
        int_args += ([f"n{k}_{v}" for v in ("span", "size", "count", "inner", "start")] if narrow_of(node) is not None
                     else [f"c{k}_inner", f"c{k}_total"] + [f"c{k}_start{i}" for i in range(len(t) + 1)])
    body, ops, exprs = _statements(gm, cone, ctx, leaves, gathers, {**gather_ctx, **permute_ctx, **slice_ctx}, cut, members)
    return {"prelude": (*index_lines, *loads), "body": body, "expr": exprs[(out, 0)], "ops": ops,
            "sizes": (*shapes, *sizes, "shape = s0"), "int_args": tuple(int_args)}


def _slice_lines(node, var: str, c: int, k: int, ctx, slice_ctx: dict, read) -> list[str]:
    """The index arithmetic of the narrow or cat ``node`` (the ``k``-th of the pass), computed in
    context ``c`` (index variable ``var``): each input read in a context of its own."""
    if narrow_of(node) is not None:
        dim, _ = narrow_of(node)
        source = ctx.number(f"n{k}", _shape(node.args[0]))
        slice_ctx[(node, c)] = (k, source, c, dim)
        read(node, node.args[0], source)
        return [f"n{k} = (({var} // n{k}_span) * n{k}_size + ({var} // n{k}_inner) % n{k}_count + n{k}_start) * n{k}_inner"
                f" + {var} % n{k}_inner  # narrow along dim {dim}"]
    pieces, dim = cat_of(node)
    lines, contexts = [f"r{k} = ({var} // c{k}_inner) % c{k}_total  # the coordinate along dim {dim} of a cat"], []
    for i, piece in enumerate(pieces):
        contexts.append(ctx.number(f"c{k}_{i}", _shape(piece)))
        read(node, piece, contexts[-1])
        inside, length = f"(r{k} >= c{k}_start{i}) & (r{k} < c{k}_start{i + 1})", f"(c{k}_start{i + 1} - c{k}_start{i})"
        lines.append(f"c{k}_{i} = tl.where({inside}, (({var} // (c{k}_total * c{k}_inner)) * {length} + r{k} - c{k}_start{i})"
                     f" * c{k}_inner + {var} % c{k}_inner, 0)  # piece {i}, read at 0 outside its run")
    slice_ctx[(node, c)] = (k, tuple(contexts), c, dim)
    return lines


def _slice_sizes(node, k: int, t, c: int, dim: int) -> list[str]:
    """The launcher's statements computing a narrow's or a cat's sizes (``t``: its input's context,
    or its pieces')."""
    if narrow_of(node) is not None:
        return [f"n{k}_size, n{k}_count, n{k}_inner = s{t}[{dim}], s{c}[{dim}], math.prod(s{t}[{dim + 1}:])",
                f"n{k}_span, n{k}_start = n{k}_count * n{k}_inner, {narrow_of(node)[1]}"]
    return [f"c{k}_inner, c{k}_total, c{k}_start0 = math.prod(s{c}[{dim + 1}:]), s{c}[{dim}], 0",
            *(f"c{k}_start{i + 1} = c{k}_start{i} + s{p}[{dim}]" for i, p in enumerate(t))]


def _context_shapes(ctx, leaves, gathers, gather_ctx, permute_ctx, names, cone) -> tuple[list[str], list[str]]:
    """The launcher's statements naming every context's shape ``s<c>`` (each from what is known
    before it), and those computing each gather's sizes and each permute's strides (``permute_ctx``
    holds the narrows' and cats' contexts too, and their sizes are computed here)."""
    known: dict[int, str] = {}
    while len(known) < len(ctx.keys):
        progress = False
        for c, (_, shape) in enumerate(ctx.keys):
            if c in known:
                continue
            source = _shape_source(c, shape, ctx, leaves, gathers, {**gather_ctx, **permute_ctx}, names, cone, known)
            if source is not None:
                known[c] = source
                progress = True
        if not progress:
            raise ew.Unsupported("a shape inside the pass cannot be found from its inputs")
    shapes = [f"s{c} = tuple({source})" for c, source in known.items()]
    sizes = []
    for (node, _), (k, t, c, perm) in permute_ctx.items():  # each output dimension's stride and size, its input's stride
        if narrow_of(node) is not None or cat_of(node) is not None:
            sizes += _slice_sizes(node, k, t, c, perm)
            continue
        sizes += [f"q{k}_s{d}, q{k}_n{d}, q{k}_t{d} = math.prod(s{c}[{d + 1}:]), s{c}[{d}], math.prod(s{t}[{p + 1}:])"
                  for d, p in enumerate(perm)]
    for (node, _), (k, t, _) in gather_ctx.items():
        g = gathers[node]
        count = f"{names[g.index]}.numel()" if g.select else f"{names[g.index]}.shape[{g.dim}]"
        sizes += [f"g{k}_size, g{k}_inner, g{k}_count = s{t}[{g.dim}], math.prod(s{t}[{g.dim + 1}:]), {count}",
                  f"g{k}_span = g{k}_count * g{k}_inner"]
    return shapes, sizes


def _shape_source(c, shape, ctx, leaves, gathers, gather_ctx, names, cone, known) -> str | None:
    """Python source of context ``c``'s shape from a tensor of that shape, or a relabeling, permute
    or gather computed there whose input shapes are ``known``; None when none is known yet
    (``gather_ctx`` holds the permutes' contexts too)."""
    for (leaf, lc), _ in leaves.items():
        if lc == c and _shape(leaf) == shape and leaf.meta["tensor_meta"].dtype.is_floating_point:
            return f"{names[leaf]}.shape"
    for node in cone:
        if c not in ctx.of.get(node, ()):
            continue
        if (node, c) in gather_ctx and (narrow_of(node) is not None or cat_of(node) is not None):
            _, t, _, dim = gather_ctx[(node, c)]
            pieces = (t,) if narrow_of(node) is not None else t
            if all(p in known for p in pieces):
                length = _shape(node)[dim] if narrow_of(node) is not None else " + ".join(f"s{p}[{dim}]" for p in pieces)
                return f"s{pieces[0]}[:{dim}] + ({length},) + s{pieces[0]}[{dim + 1}:]"
        elif (node, c) in gather_ctx and node not in gathers:  # a permute of its input's shape
            k, t, _, perm = gather_ctx[(node, c)]
            if t in known:
                return "(" + "".join(f"s{t}[{p}], " for p in perm) + ")"
        elif (node, c) in gather_ctx:
            k, t, _ = gather_ctx[(node, c)]
            g = gathers[node]
            if not g.select:
                return f"{names[g.index]}.shape"
            if t in known:
                return f"s{t}[:{g.dim}] + tuple({names[g.index]}.shape) + s{t}[{g.dim + 1}:]"
        elif relabel_shape(node, "s") is not None:
            inner = ctx.keys.index((ctx.keys[c][0], _shape(node.args[0])))
            if inner in known:
                return relabel_shape(node, f"s{inner}")
    return None


def _statements(gm, cone, ctx, leaves, gathers, gather_ctx, cut, members) -> tuple[tuple, tuple, dict]:
    """One Triton statement per elementwise node of ``cone`` and context it is computed in (gathers
    and relabelings name the value they read): (statements, operation names (one per node),
    the expression of each (node, context))."""
    exprs, body, ops = {}, [], []
    copied = copied_permutes(cone)

    def value(node, arg, c: int) -> str:
        return exprs[(arg, c)] if arg in members and (node, arg) not in cut else leaves[(arg, c)]

    for node in cone:
        for c in ctx.of[node]:
            key, first = (node, c), c == ctx.of[node][0]
            if node in gathers:
                exprs[key] = value(node, gathers[node].table, gather_ctx[key][1])
                ops += [gathers[node].op] if first else []
            elif key in gather_ctx and narrow_of(node) is not None:  # a view: the value read at its input's position
                exprs[key] = value(node, node.args[0], gather_ctx[key][1])
            elif key in gather_ctx and cat_of(node) is not None:  # each position's value from the piece holding it
                k, pieces, _, _ = gather_ctx[key]
                picked = value(node, cat_of(node)[0][-1], pieces[-1])
                for i in reversed(range(len(pieces) - 1)):
                    picked = f"tl.where(r{k} < c{k}_start{i + 1}, {value(node, cat_of(node)[0][i], pieces[i])}, {picked})"
                exprs[key] = f"t{len(body)}"
                body.append(f"{exprs[key]} = {picked}  # cat")
                ops += ["cat"] if first else []
            elif key in gather_ctx:  # a permute (an operation where the pass does PyTorch's copy of it)
                exprs[key] = value(node, node.args[0], gather_ctx[key][1])
                ops += ["permute"] if node in copied and first else []
            elif relabel_shape(node, "s") is not None:
                exprs[key] = value(node, node.args[0], ctx.number(ctx.keys[c][0], _shape(node.args[0])))
            else:
                named = {arg.name: value(node, arg, c) for arg in arg_nodes(node)}
                expr, op = expression(gm, node, named)
                exprs[key] = f"t{len(body)}"
                body.append(f"{exprs[key]} = {expr}  # {op}")
                ops += [op] if first else []
    return tuple(body), tuple(ops), exprs


def _computed(cone, ctx):
    """(node, context) for each context each node of ``cone`` is computed in, users before what
    they read, so every context of a node is known when it is met."""
    for node in reversed(cone):
        if not ctx.of.get(node):
            raise ew.Unsupported(f"{node.name} is not read by the pass's output")
        for c in list(ctx.of[node]):
            yield node, c

