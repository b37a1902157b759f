"""GroupNorm, BatchNorm, LayerNorm, softmax-over-channels calls and row operations (:mod:`.rows`)
as Triton passes with their prologues and epilogues."""

from __future__ import annotations

from dataclasses import replace

from loopwise.kernels.expert.partition.depthwise import folded_pad
from loopwise.kernels.expert.partition.groups import fusible
from loopwise.kernels.expert.partition.nodes import (arg_nodes, dtype_name, float32_shape, float_shape, model_tensors,
                                                     operand_shapes, read_elsewhere, statements)
from loopwise.kernels.expert.partition.offsets import pool_wide
from loopwise.kernels.expert.partition.records import BatchNormCall, Norm, PoolOp
from loopwise.kernels.expert.partition.rows import row_source
from loopwise.kernels.expert.partition.writes import late_writes


_NORMS = {"GroupNorm": "group", "BatchNorm1d": "batch", "BatchNorm2d": "batch", "BatchNorm3d": "batch",
          "LayerNorm": "layer"}




def norm_calls(gm) -> list:
    """The nn.GroupNorm, nn.BatchNorm1d/2d/3d and nn.LayerNorm calls on one float32, float16 or
    bfloat16 (N, C, ...) tensor (no other arguments; their passes read it upcast and compute in
    fp32, as PyTorch's half-precision norms do, and store its dtype)."""
    import torch.fx as fx

    found = []
    for node in gm.graph.nodes:
        if node.op != "call_module" or type(gm.get_submodule(node.target)).__name__ not in _NORMS:
            continue
        src = node.args[0] if len(node.args) == 1 and not node.kwargs else None
        sub = gm.get_submodule(node.target)
        shape = float_shape(src) if isinstance(src, fx.Node) else None
        if shape is None or len(shape) < 2 or float_shape(node) != shape:
            continue
        if type(sub).__name__ == "LayerNorm":  # over the trailing dimensions
            normalized = tuple(sub.normalized_shape)
            if shape[len(shape) - len(normalized):] != normalized:
                continue
        found.append(node)
    return found


_SOFTMAX_MAX_CHANNELS = 1024  # all of a position's channels in one program's registers


def softmax_calls(gm) -> list:
    """The softmaxes over dimension 1 of one float32 (N, C, ...) tensor of at least three dimensions
    and at most _SOFTMAX_MAX_CHANNELS channels: ``torch.softmax`` / ``F.softmax`` / ``Tensor.softmax``
    (no dtype argument) and nn.Softmax modules."""
    import torch.fx as fx

    found = []
    for node in gm.graph.nodes:
        if node.op == "call_module" and type(gm.get_submodule(node.target)).__name__ == "Softmax":
            dim, extra = gm.get_submodule(node.target).dim, len(node.args) != 1 or bool(node.kwargs)
        elif (node.op == "call_function" and getattr(node.target, "__name__", "") == "softmax"
              and getattr(node.target, "__module__", "") in ("torch", "torch.nn.functional", "torch._C._VariableFunctions")) \
                or (node.op == "call_method" and node.target == "softmax"):
            given = dict(zip(("input", "dim"), node.args)) | dict(node.kwargs)
            dim = given.get("dim")
            extra = bool(len(node.args) > 2 or set(given) - {"input", "dim", "_stacklevel", "dtype"}
                         or given.get("dtype") is not None)
        else:
            continue
        src = node.args[0] if node.args else None
        shape = float32_shape(src) if isinstance(src, fx.Node) else None
        if extra or shape is None or len(shape) < 3 or not isinstance(dim, int) or dim % len(shape) != 1:
            continue
        if shape[1] <= _SOFTMAX_MAX_CHANNELS and float32_shape(node) == shape:
            found.append(node)
    return found


_BATCH_NORM_ARGS = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")


def batch_norm_calls(gm) -> dict:
    """{node: its :class:`BatchNormCall`} for each ``F.batch_norm`` of a float (N, C, ...) tensor
    whose running statistics, weight and bias are the model's tensors and whose options are
    numbers: a BatchNorm part computes it as it computes an nn.BatchNorm in the same mode."""
    import torch.nn.functional as F

    found = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not F.batch_norm or not node.args:
            continue
        given = dict(zip(_BATCH_NORM_ARGS, node.args)) | dict(node.kwargs)
        tensors = [given.get(name) for name in _BATCH_NORM_ARGS[1:5]]
        shape = float_shape(node.args[0]) if hasattr(node.args[0], "op") else None
        options = (given.get("training", False), given.get("momentum", 0.1), given.get("eps", 1e-5))
        if (shape is None or len(shape) < 2 or float_shape(node) != shape or set(given) - set(_BATCH_NORM_ARGS)
                or not all(getattr(t, "op", None) == "get_attr" for t in tensors)
                or not isinstance(options[0], bool) or not all(isinstance(v, (int, float)) for v in options[1:])):
            continue
        found[node] = BatchNormCall(*(t.target for t in tensors), options[0], float(options[1]), float(options[2]))
    return found


def _part_kind(gm, node, row) -> str:
    """The kind of the part computing ``node`` (``row``: its record from :mod:`.rows`, :mod:`.pools`
    or :func:`batch_norm_calls`, or None)."""
    if isinstance(row, BatchNormCall):
        return "batch"
    if row is not None:
        return "pool" if isinstance(row, PoolOp) else "row"
    if node.op == "call_module" and type(gm.get_submodule(node.target)).__name__ in _NORMS:
        return _NORMS[type(gm.get_submodule(node.target)).__name__]
    return "softmax"


def norm_passes(gm, model, groups, outputs, norm_nodes, rows=None):
    """Each norm of ``norm_nodes`` becomes Triton passes (:class:`Norm`); an elementwise group whose
    output only the norm reads becomes its prologue, one whose only activation input is the norm's
    output (read by nothing else) its epilogue, where their tensors hold one value per channel (for
    a row operation or a pooling, ``rows``' nodes (:mod:`.rows`, :mod:`.pools`: their RowOp or
    PoolOp), any tensors a fused pass reads: they are read broadcast as there; ``rows`` also maps
    each functional batch_norm to its :class:`BatchNormCall`). Returns the groups left, their
    outputs, and [(Norm, (the node it computes, activation nodes))]."""
    rows = rows or {}
    norms, taken, written = [], set(), late_writes(gm)
    for node in norm_nodes:
        row, kind = rows.get(node), _part_kind(gm, node, rows.get(node))
        call = row if isinstance(row, BatchNormCall) else None
        row = None if call else row
        module = node.op == "call_module" and kind in ("group", "batch", "layer")
        src, readers, skipped = row_source(node) if row else (node.args[0], {node}, set())
        pad = folded_pad(gm, node) if isinstance(row, PoolOp) and row.reduce == "conv" else None
        if pad is not None:  # a depthwise convolution reads the pad's input, zeros outside it
            src, readers, skipped = pad.args[0], {pad}, set()
        channel_wise = _any_tensors if row else _channel_tensors(gm, model, node, kind, float_shape(src))
        # a pass that reads half precision keeps its own launch where the norm's passes read fp32 only
        free = [i for i in range(len(outputs)) if i not in taken and not groups[i].prelude
                and (kind in ("row", "pool", "group", "batch", "layer") or not groups[i].upcast)
                and model_tensors(outputs[i][2])]
        # a prologue that reads through gathers, slices or permutes: a row part reads its input at
        # flat positions of its contiguous layout (not over dimensions apart, nor an index reduction
        # of half values, whose prologue rounds each operation)
        indexed = [i for i in range(len(outputs)) if i not in taken and groups[i].prelude
                   and model_tensors(outputs[i][2]) and not (row.op in ("argmax", "argmin") and groups[i].upcast)] \
            if kind == "row" and not row.dims else []
        # an epilogue of a part whose output has its input's shape (a scan, a softmax) may read that
        # input too, at the same position (``cumsum(x) - x``, an exclusive scan)
        # (not a tensor written in place later: the epilogue would read the value before the write)
        same = src if kind == "row" and not row.reduces and not row.exclusive and src not in written else None
        post, cone = next(((i, c) for i in free for c in [_epilogue(outputs[i], node, same)]
                           if c is not None and channel_wise(outputs[i][2]) and not read_elsewhere(node, outputs, i)),
                          (None, None))
        pre = next((i for i in free + indexed if i != post and outputs[i][0] is src
                    and set(src.users) <= readers | set(cone or ()) and channel_wise(outputs[i][2])
                    and not _running(node, kind, call) & _targets(outputs[i][2])), None)
        # work the part does itself (an exclusive scan's shift)
        taken.update(i for i in range(len(outputs)) if outputs[i][0] in skipped)
        xs, values = [src], {"inputs": 1, "operands": (), "body": (), "expr": "x0", "ops": ()}
        if pre is not None:  # the group's pass as _groups wrote it (inputs x0.., tensors p0..)
            taken.add(pre)
            xs = outputs[pre][1]
            values = _prologue(gm, row, groups[pre], outputs[pre])
        values["ops"] = (*values["ops"], row.op if row else "softmax" if kind == "softmax" else f"{kind}_norm")
        computed = node
        if post is not None:
            taken.add(post)
            computed, ps = outputs[post][0], [p for p in outputs[post][2] if any(p in arg_nodes(n) for n in cone)]
            # v: the entry the part read there (a scan's or softmax's input)
            names = {node.name: "y", src.name: "v"} | {p.name: f"q{j}" for j, p in enumerate(ps)}
            body, ops, expr = statements(gm, cone, names, computed)
            values.update(post_operands=tuple(p.target for p in ps), post_body=body, post_expr=expr,
                          ops=(*values["ops"], *ops))
        # the pass that reads the part's value broadcast over its input's positions (a norm written
        # out: ``x * rsqrt(mean(x^2, -1, keepdim=True) + eps)``): the part's program walks its rows
        # again and computes it there
        spread = _spread(gm, model, outputs, taken | {i for i in (pre, post) if i is not None}, row, src, computed,
                         written, xs) if kind == "row" else None
        if spread is not None:
            taken.add(spread)
            stat, (computed, zs, zps, _) = computed, outputs[spread]
            values.update(spread=groups[spread], spread_stat=zps.index(stat),
                          ops=(*values["ops"], *groups[spread].ops))
            xs = [*xs, *zs, *(p for p in zps if p is not stat)]
        values["out_dtype"] = dtype_name(computed)  # the graph's dtype: an epilogue may promote a half norm's
        if row:
            values[kind] = replace(row, out_dtype=dtype_name(stat if spread is not None else computed))
        if isinstance(row, PoolOp):
            values["wide"] = pool_wide(row, float_shape(src), float_shape(node))
        if call:
            values["call"] = call
        norms.append((Norm(node.target if module else "", kind, **values), (computed, xs)))
    keep = [i for i in range(len(groups)) if i not in taken]
    return [groups[i] for i in keep], [outputs[i] for i in keep], norms


def _spread(gm, model, outputs, taken, row, src, stat, written, xs) -> int | None:
    """The pass (its index in ``outputs``) that the reduction part ``row`` can compute as it walks
    its rows a second time, or None: a pass over the positions of the part's input ``src`` that
    reads the part's value ``stat`` broadcast, one value per row that program computed (kept
    dimensions where the input's are, the reduced ones of one entry or, leading, dropped), and is
    the only reader of ``stat``. Not where the forward writes the tensors the part reads in place
    (the part would read them later, where that pass is)."""
    if not row.reduces or row.op in ("argmax", "argmin") or row.dims or any(x in written for x in xs):
        return None
    shape, kept = float_shape(src), float_shape(stat)
    if shape is None or kept is None or len(kept) > len(shape) or kept == shape:
        return None
    reduced = set(row.dims or range(row.first, row.last + 1))
    padded = (1,) * (len(shape) - len(kept)) + tuple(kept)
    if any(padded[d] != (1 if d in reduced else n) for d, n in enumerate(shape)):
        return None  # another program's rows would be read
    for i, (out, zs, zps, cone) in enumerate(outputs):
        if i in taken or stat not in zps or stat in zs or float_shape(out) != shape:
            continue
        if set(stat.users) <= set(cone) and not any(z in written for z in (*zs, *zps)) \
                and _read_in_place(gm, model, cone, stat, shape):
            return i
    return None


def _read_in_place(gm, model, cone, stat, shape) -> bool:
    """Whether the pass of ``cone`` reads ``stat`` at its own output positions: every operation from
    ``stat`` to the output is elementwise over ``shape`` (no gather, slice or permute after it,
    which would read the value of another row, one another program may not have stored yet)."""
    inside, seen = set(cone), set()
    stack = [u for u in stat.users if u in inside]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if float_shape(node) != shape or not fusible(gm, model, node):
            return False
        stack.extend(u for u in node.users if u in inside)
    return True


def _epilogue(output, node, src) -> list | None:
    """The nodes of the pass ``output`` (out, xs, ps, cone) that an epilogue of the part computing
    ``node`` computes, in graph order: the pass reads ``node`` and every other reader of ``node`` is
    in it, and its activations are ``node`` alone, or ``node`` and the part's input ``src`` (the
    part then computes what the pass computes from the activations it reads to make ``src``, so
    that work drops out); else None."""
    out, xs, _, full = output
    if not all(u in full for u in node.users):
        return None
    if xs == [node]:
        return full
    if src is None:
        return None
    inside, kept, stack = set(full), set(), [out]
    while stack:  # what ``out`` needs, from ``node``, ``src`` and the model's tensors
        current = stack.pop()
        if current in kept or current in (node, src):
            continue
        if current not in inside:
            return None  # another activation
        kept.add(current)
        stack.extend(a for a in arg_nodes(current) if a.op != "get_attr")
    reads = {a for n in kept for a in arg_nodes(n)}
    return [n for n in full if n in kept] if node in reads and node not in kept else None


def _prologue(gm, row, g, output) -> dict:
    """The Norm fields of the prologue ``g`` (its pass's ``output``: out, xs, ps, cone) of a part
    computing ``row``. An index reduction (argmax, argmin) of fp16 / bf16 values sees each operation's
    result rounded to its dtype, as PyTorch stores it: values that rounding makes equal are a tie
    there (the first index wins), which fp32 would break. Elsewhere fp32 only makes them more accurate."""
    fields = {"inputs": g.inputs, "operands": g.operands, "body": g.body, "expr": g.expr, "ops": g.ops,
              "prelude": g.prelude, "sizes": g.sizes, "int_args": g.int_args}
    if getattr(row, "op", None) in ("argmax", "argmin") and g.upcast:
        out, xs, ps, cone = output
        names = {x.name: f"x{i}" for i, x in enumerate(xs)} | {p.name: f"p{j}" for j, p in enumerate(ps)}
        fields["body"], _, fields["expr"] = statements(gm, cone, names, out, rounded=True)
    return fields


def _running(node, kind, call) -> set:
    """The running statistics a BatchNorm part updates in place before its normalize pass (attribute
    paths): a prologue that reads them would read them moved there, so it keeps its own pass."""
    if call:
        return {call.running_mean, call.running_var}
    return {f"{node.target}.running_mean", f"{node.target}.running_var"} if kind == "batch" else set()


def _targets(ps) -> set:
    return {p.target for p in ps}


def _any_tensors(ps) -> bool:
    return True


def _channel_tensors(gm, model, node, kind, shape):
    """Whether the model's tensors a norm's prologue or epilogue reads (get_attr nodes) each hold one
    value per channel (for a LayerNorm, per position of its normalized dimensions)."""
    if kind == "layer":  # one value per position of the normalized (trailing) dimensions
        normalized = tuple(gm.get_submodule(node.target).normalized_shape)
        per_channel = tuple((1,) * j + normalized for j in range(len(shape) - len(normalized) + 1))
    else:
        c, rest = shape[1], (1,) * (len(shape) - 2)
        per_channel = ((c,), (c, *rest), (1, c, *rest))
    return lambda ps: all(s in per_channel for s in operand_shapes(model, ps))
