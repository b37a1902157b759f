"""The elementwise detector: a chain of elementwise operations over inputs that broadcast together."""

from __future__ import annotations

from dataclasses import replace

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.expressions import check_operand, expression
from loopwise.kernels.expert.fx_graph import call_arg, graph_inputs
from loopwise.kernels.expert.pattern import Pattern


def detect_elementwise(gm, model, args) -> Pattern:
    """The elementwise pattern of a forward that no whole-forward detector took: its operations as
    one fused pass over its inputs (and the model's tensors that broadcast against them), in fp32
    arithmetic whatever their float dtype (:func:`half_precision`).

    Raises:
        ew.Unsupported: an operation the pass cannot express, or inputs that do not broadcast
            together as one contiguous run of dimensions.
    """
    import torch

    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    placeholders = graph_inputs(gm)
    exprs = {p.name: f"x{i}" for i, p in enumerate(placeholders)}
    views, shapes = _input_views(nodes, placeholders, args)
    exprs |= {node.name: exprs[placeholders[i].name] for node, i in views.items()}
    nodes = [n for n in nodes if n not in views]
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    if output.args[0] in views:
        raise ew.Unsupported("forward returns a view of an input")
    if not shapes:
        raise ew.Unsupported("the output reads no input")
    try:
        out_shape, full, broadcast = _broadcast_inputs(shapes)
    except ew.Unsupported:
        chain(gm, model, nodes, exprs, len(placeholders), None)  # an unsupported operation is the first reason
        raise
    fused = chain(gm, model, nodes, exprs, len(placeholders), out_shape)
    # inputs the operations never read are not loaded (their shape may be any)
    unused = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in shapes)
    params = (("full", full), ("broadcast", broadcast), ("unsqueeze", tuple(_unsqueezes(views).items())),
              ("unused", unused)) if broadcast or unused or views else ()
    # plain-number inputs (a scale passed to forward) are kernel arguments: tensors keep their order
    return replace(fused, params=params + half_precision(gm, model, args, fused.operands),
                   scalars=tuple(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)))


def half_precision(gm, model, args, operands) -> tuple:
    """The template parameters of a fused pass that reads or writes fp16 / bf16: ``upcast`` (every
    load is cast to float32, the arithmetic stays fp32, the store casts to the output's dtype) and
    ``out_dtype``, the dtype PyTorch's type promotion gives the forward's output (run on the meta
    device); () where everything is float32, so that pass is written as it always was.

    Raises:
        ew.Unsupported: the output is not float32, float16 or bfloat16.
    """
    import functools

    import torch

    dtypes = [a.dtype for a in args if isinstance(a, torch.Tensor)]
    dtypes += [functools.reduce(getattr, path.split("."), model).dtype for path in operands]
    try:
        with torch.no_grad():
            out = gm(*args)
    except Exception as exc:  # noqa: BLE001 - an operation without a meta kernel
        raise ew.Unsupported(f"the output's dtype could not be read on the meta device ({type(exc).__name__})") from None
    if not isinstance(out, torch.Tensor) or out.dtype not in ew.FLOAT_DTYPES:
        raise ew.Unsupported(f"the output is {getattr(out, 'dtype', type(out).__name__)}, not float32, float16 or "
                             "bfloat16")
    if all(d == torch.float32 for d in (*dtypes, out.dtype)):
        return ()
    return ("upcast", True), ("out_dtype", str(out.dtype).removeprefix("torch."))


def chain(gm, model, nodes, exprs: dict, count: int, shape: tuple[int, ...] | None) -> Pattern:
    """The elementwise pattern of ``nodes`` over the inputs named in ``exprs`` (of ``shape``; None:
    the operations alone are checked, not the model tensors they read)."""
    exprs = dict(exprs)
    ops, body, operands = [], [], []
    for node in nodes:
        if node.op == "get_attr":  # a tensor of the model: loaded through its broadcast index, no statement
            if node.target not in operands:
                operands.append(node.target)
            exprs[node.name] = f"p{operands.index(node.target)}"
            continue
        expr, op = expression(gm, node, exprs)
        exprs[node.name] = f"t{len(body)}"  # one statement per operation: no repeated subexpressions
        body.append(f"{exprs[node.name]} = {expr}  # {op}")
        ops.append(op)
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    result = out.args[0]
    if not hasattr(result, "name"):
        raise ew.Unsupported("forward returns more than one tensor")
    if result.name not in exprs:
        raise ew.Unsupported("forward returns something other than the fused result")
    if operands and not _reaches_input(result):
        raise ew.Unsupported("the output does not depend on the inputs (its shape would be the parameters')")
    for target in operands if shape is not None else ():  # after the operations: theirs is the first reason
        check_operand(model, target, shape)
    return Pattern("elementwise", inputs=count, expr=exprs[result.name], ops=tuple(ops),
                   body=tuple(body), operands=tuple(operands))


def _reaches_input(node) -> bool:
    """Whether ``node`` is computed from a forward input (so the output has the inputs' shape)."""
    seen, stack = set(), [node]
    while stack:
        current = stack.pop()
        if current.op == "placeholder":
            return True
        if current not in seen:
            seen.add(current)
            stack.extend(current.all_input_nodes)
    return False


def _new_axes(node) -> tuple[int, ...] | None:
    """The positions of the size-1 dimensions a view node inserts (``x.unsqueeze(d)``,
    ``torch.unsqueeze(x, d)``, ``x[:, None]``), in the order PyTorch inserts them; None for any other
    node. A negative unsqueeze dimension is returned as given (resolved against the input's rank)."""
    import operator

    import torch

    if (node.op == "call_method" and node.target == "unsqueeze") or (
            node.op == "call_function" and node.target is torch.unsqueeze):
        dim = call_arg(node, "dim", 1)
        return (dim,) if isinstance(dim, int) else None
    if node.op == "call_function" and node.target is operator.getitem:
        index = node.args[1] if isinstance(node.args[1], tuple) else (node.args[1],)
        if not all(i is None or i == slice(None) for i in index) or None not in index:
            return None
        return tuple(p for p, i in enumerate(index) if i is None)
    return None


def _input_views(nodes, placeholders, args) -> tuple[dict, dict]:
    """Views that only insert size-1 dimensions into a tensor input (``a.unsqueeze(1)``,
    ``a[:, None]``, chains of them): {view node: input index} (the fused pass reads the input
    through them, they emit no statement), and the shape of each tensor input the operations
    read (or the forward returns), as they see it. Raises Unsupported when an input is used under
    two shapes."""
    import torch

    index = {p.name: i for i, p in enumerate(placeholders)}
    shape_of = {p.name: tuple(args[i].shape) for i, p in enumerate(placeholders) if isinstance(args[i], torch.Tensor)}
    views: dict = {}
    for node in nodes:
        axes = _new_axes(node)
        source = node.args[0] if node.args else None
        if axes is None or getattr(source, "name", None) not in shape_of:
            continue  # not a view, or a view of something other than an input (or a view of one)
        shape = list(shape_of[source.name])
        for axis in axes:
            shape.insert(axis if axis >= 0 else axis + len(shape) + 1, 1)
        shape_of[node.name] = tuple(shape)
        views[node] = index[source.name] if source.name in index else views[source]
    used: dict[int, set] = {}
    for node in nodes:
        if node in views:
            continue
        for arg in node.all_input_nodes:
            i = index.get(arg.name, views.get(arg))
            if i is not None and arg.name in shape_of:
                used.setdefault(i, set()).add(shape_of[arg.name])
    for p in placeholders:  # an input the forward returns as it is
        if p.name in shape_of and any(user.op == "output" for user in p.users):
            used.setdefault(index[p.name], set()).add(shape_of[p.name])
    shapes = {}
    for i, seen in sorted(used.items()):
        if len(seen) > 1:
            raise ew.Unsupported(f"input {i} is used under more than one shape ({', '.join(map(str, sorted(seen)))})")
        shapes[i] = next(iter(seen))
    return views, shapes


def _unsqueezes(views: dict) -> dict[int, tuple[int, ...]]:
    """Per input, the size-1 dimensions its views insert, in the order they insert them (the
    generated forward replays them with ``unsqueeze``, which reads negative positions as the trace
    did), for the views the operations read."""
    out: dict[int, tuple[int, ...]] = {}
    for view in (v for v in views if not any(u in views for u in v.users)):
        chain, node = [], view
        while node in views:
            chain.append(node)
            node = node.args[0]
        out[views[view]] = tuple(axis for step in reversed(chain) for axis in _new_axes(step))
    return out


def _broadcast_inputs(shapes: dict[int, tuple[int, ...]]) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """The output shape of an elementwise forward over tensor inputs of ``shapes`` (as the
    operations see them), the first input of that shape, and the inputs that broadcast to it (each
    must do so as one run of its dimensions: one div / mod per load). Raises Unsupported otherwise."""
    import torch

    try:
        out = tuple(torch.broadcast_shapes(*shapes.values()))
    except RuntimeError as exc:
        raise ew.Unsupported(f"inputs that do not broadcast together ({exc})") from None
    full = [i for i, shape in shapes.items() if shape == out]
    if not full:
        raise ew.Unsupported(f"no input has the output's shape {out}")
    broadcast = tuple(i for i, shape in shapes.items() if shape != out)
    for i in broadcast:
        if ew.broadcast_run(out, shapes[i]) is None:
            raise ew.Unsupported(f"input {i} of shape {shapes[i]} does not broadcast against {out} as one "
                                 "contiguous run of dimensions")
    return out, full[0], broadcast

