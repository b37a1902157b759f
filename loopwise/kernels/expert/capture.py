"""Captures a problem's forward with torch.fx and recognizes what the first templates handle:
a chain of elementwise operations over same-shape inputs (and over the model's float32 tensors that
broadcast against them), such a chain after one convolution (which stays in PyTorch), a softmax over
the last dimension, a LayerNorm, a matrix product, or an nn.Linear with an elementwise epilogue.
Anything else is reported as unsupported, with the reason, and left to PyTorch."""

from __future__ import annotations

import functools
import operator
from collections import Counter
from dataclasses import dataclass, replace

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.reference_init import reference_init


@dataclass(frozen=True)
class Pattern:
    """What the expert recognized in a problem."""

    kind: str  # "elementwise" | "row_softmax" | "unsupported"
    inputs: int = 0
    expr: str = ""
    ops: tuple[str, ...] = ()
    body: tuple[str, ...] = ()  # one Triton statement per captured operation
    params: tuple[tuple[str, object], ...] = ()  # template parameters (e.g. LayerNorm's shape and eps)
    operands: tuple[str, ...] = ()  # attribute paths of the model's tensors the kernel reads (p0, p1, ...)
    init: str = ""  # ModelNew.__init__ when it must hold those tensors: the reference's own, copied
    constants: tuple[tuple[str, str], ...] = ()  # module-level literals that init reads, as (name, source)
    helpers: str = ""  # the problem's own classes and functions init builds from, copied for the module level
    prologue: str = ""  # attribute path of a module ModelNew calls on input 0 first (a conv in PyTorch / cuDNN)
    scalars: tuple[int, ...] = ()  # positions of inputs that are plain numbers (kernel arguments, not tensors)
    reason: str = ""


def _meta_model(problem):
    """``problem``'s module, its Model built on the meta device (no memory, no kernels) and its inputs."""
    import torch

    module = problem.load_module()
    with torch.device("meta"):
        return module, module.Model(*module.get_init_inputs()), list(module.get_inputs())


def trace_as_called(model, args):
    """``model``'s forward as an FX graph of the call ``model(*args)``: parameters the inputs leave
    out (an LSTM's ``h0=None``, NetVLAD's ``mask=None``) are fixed at their defaults, so control
    flow on them is traced the way the call takes it (FX's ``concrete_args``), and their
    placeholders and FX's guards on them are dropped: the graph takes exactly ``args``.

    Raises:
        ew.Unsupported: a parameter the inputs leave out has no default.
        Exception: whatever FX raises for a forward it cannot trace.
    """
    import inspect

    import torch.fx as fx

    named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    left = [p for p in list(inspect.signature(model.forward).parameters.values())[len(args):] if p.kind in named]
    if any(p.default is inspect.Parameter.empty for p in left):
        raise ew.Unsupported(f"forward takes {', '.join(p.name for p in left)} beyond the {len(args)} input(s) given, "
                             "without defaults")
    if not left:
        return _deterministic(fx.symbolic_trace(model))
    gm = fx.symbolic_trace(model, concrete_args={p.name: p.default for p in left})
    placeholders = _inputs(gm)
    fixed = placeholders[len(args):]
    guards, frontier = [], list(fixed)  # FX's checks that a fixed argument keeps its value
    while frontier:
        node = frontier.pop()
        for user in node.users:
            if user not in guards:
                guards.append(user)
                frontier.append(user)
    if any(g.op == "output" for g in guards):
        raise ew.Unsupported("the output depends on a parameter fixed at its default")
    for node in reversed(list(gm.graph.nodes)):  # users before what they use
        if node in guards or node in fixed:
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return _deterministic(gm)


# What draws random numbers in a forward: torch functions and Tensor methods (in place or not).
_RANDOM_FUNCTIONS = frozenset({"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm",
                               "normal", "bernoulli", "multinomial", "poisson", "dropout", "alpha_dropout",
                               "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d"})
_RANDOM_METHODS = frozenset({"normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_",
                             "log_normal_", "cauchy_", "bernoulli", "multinomial"})


def _deterministic(gm):
    """``gm``, unless its forward draws random numbers (a fresh ``torch.randn`` state, functional
    dropout in training mode): then its output differs from call to call, no candidate can match
    the reference (nor can the reference match itself), and ew.Unsupported says which call draws."""
    for node in gm.graph.nodes:
        name = getattr(node.target, "__name__", "") if node.op == "call_function" else node.target
        if node.op == "call_function" and name in _RANDOM_FUNCTIONS:
            if "dropout" in name:  # (input, p=0.5, training=True, ...): random only when it drops something
                given = dict(zip(("input", "p", "training"), node.args)) | dict(node.kwargs)
                if given.get("training", given.get("train", True)) is False or given.get("p", 0.5) == 0:
                    continue
            raise ew.Unsupported(f"the forward draws random numbers ({name}): the output is random, so no candidate "
                                 "can match the reference (nor can the reference match itself)")
        if node.op == "call_method" and name in _RANDOM_METHODS:
            raise ew.Unsupported(f"the forward draws random numbers (Tensor.{name}): the output is random, so no "
                                 "candidate can match the reference (nor can the reference match itself)")
    return gm


def _trace(model, args):
    """The forward's FX graph, unless a whole-forward template takes it (raises _Found) or its inputs
    rule the elementwise path out (raises ew.Unsupported)."""
    import torch

    try:
        gm = trace_as_called(model, args)
    except ew.Unsupported:
        raise
    except Exception:  # noqa: BLE001 - not traceable: no template applies (the generic path says why)
        gm = None
    if gm is not None:  # the whole-forward patterns, most specific first
        for detect in (_attention, _only_layernorm, _only_matmul, _linear_epilogue, _only_conv, _separable_conv,
                       _conv_epilogue, _dim_reduce,
                       _row_scan, _normalize, _pooling, _cross_entropy):
            found = detect(gm, model, args)
            if found is not None:
                raise _Found(found)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    numbers = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    if len(tensors) + len(numbers) != len(args) or not tensors:
        raise ew.Unsupported("inputs other than tensors and plain numbers")
    if any(t.dtype != torch.float32 for t in tensors):
        raise ew.Unsupported("inputs not float32")
    return gm if gm is not None else trace_as_called(model, args)


def _inputs(gm) -> list:
    """The traced forward's input nodes (its placeholders), in order: exactly the inputs it was
    called with (trace_as_called fixes any others at their defaults)."""
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _one_float_input(args, ndim: int | None = None) -> bool:
    """The forward takes one float32 tensor (of ``ndim`` dimensions when given, at least one)."""
    import torch

    return (len(args) == 1 and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.float32
            and args[0].dim() >= 1 and (ndim is None or args[0].dim() == ndim))


def _op_name(node) -> str:
    """A call's name, whether a function (``torch.sum``) or a method (``x.sum``)."""
    return node.target if node.op == "call_method" else getattr(node.target, "__name__", "")


def _param(node, name: str, position: int, default=None):
    """A call's argument given by keyword or by position."""
    return node.kwargs.get(name, node.args[position] if len(node.args) > position else default)


def _single(value):
    """``dim=(1,)`` as ``1``; anything else as given."""
    return value[0] if isinstance(value, (tuple, list)) and len(value) == 1 else value


_MATMULS = {"matmul", "mm"}
_TRANSPOSES = {"t", "T"}


_MATMUL_DTYPES = ("float32", "bfloat16", "float16")


def _only_matmul(gm, model, args) -> Pattern | None:
    """A model whose forward is one matrix product of its two 2-D inputs, both float32, both
    bfloat16 or both float16, either of them possibly transposed (``A @ B``,
    ``torch.matmul(A, B.T)``, ``torch.mm(A.t(), B)``)."""
    import operator

    import torch

    if len(args) != 2 or not all(isinstance(a, torch.Tensor) and a.dim() == 2 for a in args):
        return None
    dtype = str(args[0].dtype).removeprefix("torch.")
    if args[1].dtype != args[0].dtype or dtype not in _MATMUL_DTYPES:
        return None
    placeholders = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    transposed: dict = {}
    product = None
    for node in calls:
        name = getattr(node.target, "__name__", str(node.target))
        if node.op == "call_method" and node.target == "t" or (
                node.op == "call_function" and node.target is getattr and node.args[1:] == ("T",)) or (
                node.op == "call_method" and node.target == "transpose" and set(node.args[1:]) in ({0, 1}, {-1, -2})):
            source = node.args[0]
            if source not in placeholders:
                return None
            transposed[node] = source
        elif (node.op == "call_function" and (node.target in (operator.matmul, torch.matmul, torch.mm)
                                               or name in _MATMULS)) and product is None:
            product = node
        else:
            return None
    if product is None or len(product.args) != 2:
        return None
    operands = []
    for arg in product.args:
        if arg in placeholders:
            operands.append((placeholders.index(arg), False))
        elif arg in transposed:
            operands.append((placeholders.index(transposed[arg]), True))
        else:
            return None
    if [i for i, _ in operands] != [0, 1]:
        return None
    (m, k) = args[0].shape[::-1] if operands[0][1] else args[0].shape
    (k2, n) = args[1].shape[::-1] if operands[1][1] else args[1].shape
    if k != k2:
        return None
    return Pattern("matmul", inputs=2, ops=("matmul",),
                   params=(("trans_a", operands[0][1]), ("trans_b", operands[1][1]),
                           ("m", int(m)), ("n", int(n)), ("k", int(k)), ("dtype", dtype)))


def _linear_epilogue(gm, model, args) -> Pattern | None:
    """A model whose forward is one nn.Linear on its 2-D float32 input followed by elementwise
    operations on the product (constants, and model tensors of one value per output column): a GEMM
    with its epilogue fused. None when the forward is anything else."""
    import torch
    import torch.nn as nn

    if not _one_float_input(args, ndim=2):
        return None
    (x,) = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if not calls or calls[0].op != "call_module" or calls[0].args[:1] != (x,):
        return None
    linear = gm.get_submodule(calls[0].target)
    if not isinstance(linear, nn.Linear) or linear.in_features != args[0].shape[1]:
        return None
    n = linear.out_features
    operands = [f"{calls[0].target}.weight"] + ([f"{calls[0].target}.bias"] if linear.bias is not None else [])
    exprs = {calls[0].name: "acc"}
    ops, body = ["linear"], []
    for node in calls[1:]:
        if node.op == "get_attr":
            value = functools.reduce(getattr, node.target.split("."), model)
            if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.numel() != n \
                    or tuple(value.shape)[-1:] != (n,):
                raise ew.Unsupported(f"model tensor {node.target!r} is not one float32 value per output column")
            if node.target not in operands:
                operands.append(node.target)
            exprs[node.name] = f"p{operands.index(node.target)}"
            continue
        if any(hasattr(a, "name") and a.name not in exprs for a in node.args):
            raise ew.Unsupported("an operation after the linear layer reads something other than its result")
        expr, op = _expr(gm, node, exprs)
        exprs[node.name] = f"t{len(body)}"
        body.append(f"{exprs[node.name]} = {expr}  # {op}")
        ops.append(op)
    (out,) = [nd for nd in gm.graph.nodes if nd.op == "output"]
    if not hasattr(out.args[0], "name") or out.args[0].name not in exprs:
        return None
    return Pattern("linear", inputs=1, expr=exprs[out.args[0].name], ops=tuple(ops), body=tuple(body),
                   operands=tuple(operands), params=(("n", n), ("k", linear.in_features),
                                                     ("has_bias", linear.bias is not None)))


class _Found(Exception):
    def __init__(self, pattern: Pattern) -> None:
        super().__init__(pattern.kind)
        self.pattern = pattern


def _attention(gm, model, args) -> Pattern | None:
    """A forward that is one ``F.scaled_dot_product_attention(q, k, v)`` of its three inputs (float32,
    bfloat16 or float16, at least 3-D, batch dimensions alike), without a mask or dropout, with
    ``is_causal`` and ``scale`` given as constants if at all: flash-style attention. None when the
    forward is anything else."""
    import torch

    if len(args) != 3 or not all(isinstance(a, torch.Tensor) and a.dim() >= 3 for a in args):
        return None
    q, k, v = args
    dtype = str(q.dtype).removeprefix("torch.")
    if dtype not in _MATMUL_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return None
    placeholders = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_function" or _op_name(calls[0]) != "scaled_dot_product_attention":
        return None
    call = calls[0]
    if list(call.args[:3]) != placeholders:
        return None
    mask, dropout = _param(call, "attn_mask", 3), _param(call, "dropout_p", 4, 0.0)
    causal, scale = _param(call, "is_causal", 5, False), _param(call, "scale", 6)
    gqa = call.kwargs.get("enable_gqa", False)
    if mask is not None or dropout not in (0, 0.0) or not isinstance(causal, bool) or gqa \
            or not (scale is None or isinstance(scale, (int, float))):
        raise ew.Unsupported("scaled_dot_product_attention with a mask, dropout, grouped heads or a computed "
                             "scale or causal flag")
    batch = tuple(q.shape[:-2])
    if tuple(k.shape[:-2]) != batch or tuple(v.shape[:-2]) != batch or k.shape[-1] != q.shape[-1] \
            or v.shape[-2] != k.shape[-2]:
        raise ew.Unsupported("scaled_dot_product_attention with broadcast batch dimensions")
    d, dv = int(q.shape[-1]), int(v.shape[-1])
    pattern = Pattern("attention", inputs=3, ops=("attention",),
                      params=(("sq", int(q.shape[-2])), ("sk", int(k.shape[-2])), ("d", d), ("dv", dv),
                              ("causal", causal), ("scale", float(scale) if scale is not None else d ** -0.5),
                              ("dtype", dtype)))
    from loopwise.kernels.expert.generate import attention_recompute_reason  # generate imports this module

    reason = attention_recompute_reason(pattern)
    if reason:
        raise ew.Unsupported(reason)
    return pattern


def _only_layernorm(gm, model, args) -> Pattern | None:
    """A model whose forward is one nn.LayerNorm over trailing dimensions of one float32 input."""
    import torch.nn as nn

    if not _one_float_input(args):
        return None
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_module":
        return None
    ln = gm.get_submodule(calls[0].target)
    shape = tuple(ln.normalized_shape) if isinstance(ln, nn.LayerNorm) else None
    if shape is None or tuple(args[0].shape[-len(shape):]) != shape or getattr(ln, "bias", 1) is None:
        return None
    n_cols = 1
    for d in shape:
        n_cols *= d
    return Pattern("layernorm", inputs=1, ops=("layer_norm",),
                   params=(("shape", shape), ("eps", float(ln.eps)), ("affine", bool(ln.elementwise_affine)),
                           ("n_cols", n_cols), ("ndims", len(shape))))


def capture(problem) -> Pattern:
    """The pattern of ``problem``'s forward (never raises for an unsupported model)."""
    model = None
    try:
        module, model, args = _meta_model(problem)
        gm = _trace(model, args)
        pattern = _classify(gm, args, model)
        if pattern.operands:  # ModelNew must hold the same tensors: it runs the reference's __init__
            init = reference_init(problem.source, module)
            pattern = replace(pattern, init=init.text, constants=init.constants, helpers=init.helpers)
        return pattern
    except _Found as found:
        pattern = found.pattern
        if pattern.operands or pattern.prologue:  # ModelNew holds the same weights: the reference's __init__
            init = reference_init(problem.source, problem.load_module())
            pattern = replace(pattern, init=init.text, constants=init.constants, helpers=init.helpers)
        return pattern
    except ew.Unsupported as exc:
        return _unless_random(model, _partitioned(problem, str(exc)))
    except Exception as exc:  # noqa: BLE001 - tracing fails on data-dependent control flow, etc.
        return _unless_random(model, _partitioned(problem, f"cannot trace forward ({type(exc).__name__}: {exc})"))


def _unless_random(model, pattern: Pattern) -> Pattern:
    """``pattern`` (a partitioned forward, which leaves modules such as Dropout to PyTorch), or
    unsupported where the model's output is random: no candidate can match a reference that does
    not match itself, so none is proposed (each would fail the judge's comparison). ``model`` is the
    problem's Model on the meta device, or None where it could not be built (nothing known)."""
    reason = _random_output(model) if model is not None else ""
    return replace(pattern, kind="unsupported", reason=f"{reason}; {pattern.reason}") if reason else pattern


def _random_output(model) -> str:
    """Why ``model``'s output is random (a dropout module with p > 0 in training mode, the mode the
    judge runs both models in), or "" when it is not known to be."""
    from torch import nn

    dropouts = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
    for name, sub in model.named_modules():
        if isinstance(sub, dropouts) and sub.p > 0 and sub.training:
            return (f"{name or 'the model'} is a {type(sub).__name__} with p={sub.p} in training mode: the "
                    "output is random, so no candidate can match the reference (nor can the reference match "
                    "itself)")
    return ""


def _partitioned(problem, whole: str) -> Pattern:
    """No template takes the whole forward (``whole`` says why): its fusible groups, with the rest
    left to PyTorch (:mod:`partition`), or unsupported with both reasons."""
    from loopwise.kernels.expert.partition import partition

    try:
        pattern = partition(problem)
    except ew.Unsupported as exc:
        return Pattern("unsupported", reason=f"{whole}; {exc}" if str(exc) not in whole else whole)
    except Exception as exc:  # noqa: BLE001 - never raise for a model the expert cannot take
        return Pattern("unsupported", reason=f"{whole}; partition failed ({type(exc).__name__}: {exc})")
    from loopwise.kernels.expert.partition import kinds, plan

    parts = []
    for kind in kinds(pattern):
        p = plan(pattern, kind)
        fused = (*p["gemms"], *p["norms"], *p["groups"])  # a GroupNorm is three launches, one part
        parts.append(f"{kind}: {len(fused)} Triton part(s) ({_listing('+'.join(g.ops) for g in fused)}), "
                     f"in PyTorch: {_listing(p['pytorch']) or 'nothing'}")
    return replace(pattern, reason=f"partial ({whole}); " + "; ".join(parts))


def _listing(names, most: int = 8) -> str:
    """``names`` joined in order, or, past ``most`` of them, each name once with its count (in order of
    first appearance), so a 200-layer network's reason stays one readable line."""
    names = list(names)
    if len(names) <= most:
        return ", ".join(names)
    counts = Counter(names)
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())


def _classify(gm, args, model) -> Pattern:
    import torch

    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    placeholders = _inputs(gm)
    if len(nodes) == 1 and _softmax_dim(gm, nodes[0]) is not None:
        dim, log = _softmax_dim(gm, nodes[0]), _is_log_softmax(gm, nodes[0])
        name = "log_softmax" if log else "softmax"
        if dim in (-1, tensors[0].dim() - 1):
            return Pattern("row_softmax", inputs=1, ops=(name,), params=(("log", log),))
        raise ew.Unsupported(f"{name} over dim {dim}, not the last")
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
        _chain(gm, model, nodes, exprs, len(placeholders), None)  # an unsupported operation is the first reason
        raise
    chain = _chain(gm, model, nodes, exprs, len(placeholders), out_shape)
    # inputs the operations never read are not loaded (their shape may be any)
    unused = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in shapes)
    params = (("full", full), ("broadcast", broadcast), ("unsqueeze", tuple(_unsqueezes(views).items())),
              ("unused", unused)) if broadcast or unused or views else ()
    # plain-number inputs (a scale passed to forward) are kernel arguments: tensors keep their order
    return replace(chain, params=params,
                   scalars=tuple(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)))


def _new_axes(node) -> tuple[int, ...] | None:
    """The positions of the size-1 dimensions a view node inserts (``x.unsqueeze(d)``,
    ``torch.unsqueeze(x, d)``, ``x[:, None]``), in the order PyTorch inserts them; None for any other
    node. A negative unsqueeze dimension is returned as given (resolved against the input's rank)."""
    import operator

    import torch

    if (node.op == "call_method" and node.target == "unsqueeze") or (
            node.op == "call_function" and node.target is torch.unsqueeze):
        dim = _param(node, "dim", 1)
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


def _cross_entropy(gm, model, args) -> Pattern | None:
    """A forward that is one cross-entropy loss (``F.cross_entropy`` or ``nn.CrossEntropyLoss``)
    of float32 logits (rows x classes) against int64 class indices: a row reduction (log-sum-exp,
    minus the target's logit) read once per row, then the mean, sum or the rows themselves. None
    when the forward is anything else."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if len(args) != 2 or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1:
        return None
    (call,) = calls
    placeholders = _inputs(gm)
    if call.op == "call_function" and call.target is F.cross_entropy:
        if tuple(call.args[:2]) != tuple(placeholders):
            return None
        options = {name: _param(call, name, position, default) for name, position, default in (
            ("weight", 2, None), ("size_average", 3, None), ("ignore_index", 4, -100), ("reduce", 5, None),
            ("reduction", 6, "mean"), ("label_smoothing", 7, 0.0))}
    elif call.op == "call_module" and type(gm.get_submodule(call.target)) is nn.CrossEntropyLoss:
        if tuple(call.args) != tuple(placeholders) or call.kwargs:
            return None
        loss = gm.get_submodule(call.target)
        options = {"weight": loss.weight, "size_average": None, "ignore_index": loss.ignore_index, "reduce": None,
                   "reduction": loss.reduction, "label_smoothing": loss.label_smoothing}
    else:
        return None
    logits, targets = args
    if logits.dtype != torch.float32 or logits.dim() != 2:
        raise ew.Unsupported(f"cross-entropy over {logits.dtype} logits of {logits.dim()} dimension(s) (the template "
                             "takes float32 rows x classes)")
    if targets.dtype != torch.int64 or tuple(targets.shape) != tuple(logits.shape[:1]):
        raise ew.Unsupported("cross-entropy against class probabilities, or targets not one int64 index per row")
    unsupported = [f"{name}={value!r}" for name, value in options.items()
                   if name in ("weight", "size_average", "reduce") and value is not None]
    unsupported += [f"label_smoothing={options['label_smoothing']!r}"] if options["label_smoothing"] else []
    if unsupported or options["reduction"] not in ("mean", "sum", "none") or not isinstance(options["ignore_index"], int):
        raise ew.Unsupported(f"cross-entropy with {', '.join(unsupported) or options} (the template takes class indices, "
                             "no class weights or label smoothing)")
    return Pattern("cross_entropy", inputs=2, ops=("cross_entropy",),
                   params=(("ignore_index", options["ignore_index"]), ("reduction", options["reduction"]),
                           ("classes", int(logits.shape[1]))))


def zero_padding(conv) -> bool:
    """Whether a convolution module pads with zeros by amounts given as numbers (not ``"same"``),
    as the implicit-GEMM templates read their input."""
    return conv.padding_mode == "zeros" and not isinstance(conv.padding, str)


def _only_conv(gm, model, args) -> Pattern | None:
    """A forward that is one nn.Conv2d, nn.Conv3d or nn.ConvTranspose1d / 2d / 3d (groups 1, zero
    padding given as numbers) on its one float32 input: an implicit GEMM. None when the forward is
    anything else."""
    import torch.nn as nn

    if not any(_one_float_input(args, ndim=ndim) for ndim in (3, 4, 5)):
        return None
    (x,) = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_module" or calls[0].args != (x,) or calls[0].kwargs:
        return None
    conv = gm.get_submodule(calls[0].target)
    kind = {nn.Conv2d: "conv2d", nn.Conv3d: "conv3d", nn.ConvTranspose1d: "conv_transpose",
            nn.ConvTranspose2d: "conv_transpose", nn.ConvTranspose3d: "conv_transpose"}.get(type(conv))
    if kind is None or args[0].dim() != len(conv.kernel_size) + 2:
        return None
    if conv.groups != 1 or not zero_padding(conv):
        raise ew.Unsupported(f"{type(conv).__name__} with groups={conv.groups}, padding {conv.padding!r}, "
                             f"padding_mode {conv.padding_mode!r} (the implicit GEMM takes groups 1, zero padding)")
    path = calls[0].target
    operands = (f"{path}.weight",) + ((f"{path}.bias",) if conv.bias is not None else ())
    if kind == "conv_transpose":
        return Pattern(kind, inputs=1, ops=(type(conv).__name__.lower(),), operands=operands,
                       params=(("conv", path), ("module", type(conv).__name__), ("kernel", tuple(conv.kernel_size)),
                               ("stride", tuple(conv.stride)), ("padding", tuple(conv.padding)),
                               ("output_padding", tuple(conv.output_padding)), ("dilation", tuple(conv.dilation)),
                               ("has_bias", conv.bias is not None), ("in_channels", conv.in_channels),
                               ("out_channels", conv.out_channels)))
    window = (("kd", "kh", "kw") if kind == "conv3d" else ("kh", "kw"))
    extra = (("out_channels", conv.out_channels),) if kind == "conv3d" else ()
    return Pattern(kind, inputs=1, ops=(kind,), operands=operands,
                   params=(("conv", path), *zip(window, conv.kernel_size), ("stride", tuple(conv.stride)),
                           ("padding", tuple(conv.padding)), ("dilation", tuple(conv.dilation)),
                           ("has_bias", conv.bias is not None), ("in_channels", conv.in_channels), *extra))


def _separable_conv(gm, model, args) -> Pattern | None:
    """A forward that is a depthwise nn.Conv2d (one filter per channel: groups = in = out channels)
    and then a pointwise one (1x1, stride 1, no padding, groups 1) on its output, on one float32
    NCHW input (MobileNet's separable convolution, KernelBench L1/86): one kernel computes the
    depthwise outputs of a tile in registers and multiplies them by the pointwise weights, so the
    intermediate never reaches memory. None when the forward is anything else."""
    import torch.nn as nn

    if not _one_float_input(args, ndim=4):
        return None
    (x,) = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if (len(calls) != 2 or any(c.op != "call_module" or c.kwargs for c in calls)
            or calls[0].args != (x,) or calls[1].args != (calls[0],) or len(calls[0].users) != 1):
        return None
    depthwise, pointwise = (gm.get_submodule(c.target) for c in calls)
    if type(depthwise) is not nn.Conv2d or type(pointwise) is not nn.Conv2d:
        return None
    c = depthwise.in_channels
    if not (depthwise.groups == c == depthwise.out_channels and pointwise.groups == 1
            and tuple(pointwise.kernel_size) == (1, 1) and tuple(pointwise.stride) == (1, 1)
            and tuple(pointwise.padding) == (0, 0) and pointwise.in_channels == c):
        return None
    if not (zero_padding(depthwise) and zero_padding(pointwise)):
        raise ew.Unsupported("a separable convolution with padding given by name or not zeros (the fused "
                             "template takes zero padding given as numbers)")
    paths = [call.target for call in calls]
    operands = tuple(f"{path}.{name}" for path, m in zip(paths, (depthwise, pointwise))
                     for name in ("weight", "bias") if getattr(m, name) is not None)
    return Pattern("separable_conv", inputs=1, ops=("conv2d_depthwise", "conv2d_pointwise"), operands=operands,
                   params=(("depthwise", paths[0]), ("pointwise", paths[1]), ("kh", depthwise.kernel_size[0]),
                           ("kw", depthwise.kernel_size[1]), ("stride", tuple(depthwise.stride)),
                           ("padding", tuple(depthwise.padding)), ("dilation", tuple(depthwise.dilation)),
                           ("depthwise_bias", depthwise.bias is not None), ("pointwise_bias", pointwise.bias is not None),
                           ("in_channels", c), ("out_channels", pointwise.out_channels)))


def _conv_epilogue(gm, model, args) -> Pattern | None:
    """A forward that runs one convolution module on its first input and then only elementwise
    operations on the result (with the model's tensors that broadcast against it, and further
    inputs of the result's shape): the convolution stays in PyTorch (cuDNN), the operations after
    it become one fused pass. None when the forward is anything else."""
    import torch
    import torch.nn as nn

    if not args or not all(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args):
        return None
    placeholders = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) < 2 or calls[0].op != "call_module" or calls[0].args != (placeholders[0],) or calls[0].kwargs:
        return None
    conv = gm.get_submodule(calls[0].target)
    if not isinstance(conv, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                             nn.ConvTranspose3d)):
        return None
    if any(placeholders[0] in n.all_input_nodes for n in calls[1:]):
        raise ew.Unsupported("the input is read again after the convolution")
    with torch.no_grad():
        shape = tuple(conv(args[0]).shape)
    if any(tuple(a.shape) != shape for a in args[1:]):
        raise ew.Unsupported("inputs after the first do not have the convolution's output shape")
    exprs = {calls[0].name: "x0"} | {p.name: f"x{i}" for i, p in enumerate(placeholders) if i}
    chain = _chain(gm, model, calls[1:], exprs, len(placeholders), shape)
    return replace(chain, ops=(type(conv).__name__.lower(),) + chain.ops, prologue=calls[0].target)


# torch's reductions over one dimension, by the name the template knows them under; max / min with
# a dim return (values, indices), picked by [0] / [1] or .values / .indices.
_REDUCTIONS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "argmax": "argmax", "argmin": "argmin",
               "max": "max", "min": "min"}
_NEUTRAL = {"sum": "0.0", "mean": "0.0", "max": '-float("inf")', "argmax": '-float("inf")',
            "min": 'float("inf")', "argmin": 'float("inf")'}


def _dim_reduce(gm, model, args) -> Pattern | None:
    """A forward that is one reduction (sum, mean, max, min, amax, amin, argmax, argmin) of its one
    float32 input over one dimension. None when the forward is anything else."""
    import operator


    if not _one_float_input(args):
        return None
    (x,) = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if not calls or len(calls) > 2 or calls[0].op not in ("call_function", "call_method") or calls[0].args[:1] != (x,):
        return None
    node = calls[0]
    name = _op_name(node)
    if name not in _REDUCTIONS or any(k not in ("dim", "keepdim") for k in node.kwargs):
        return None
    dim, keepdim = _single(_param(node, "dim", 1)), _param(node, "keepdim", 2, False)
    if not isinstance(dim, int) or isinstance(dim, bool) or not isinstance(keepdim, bool) or len(node.args) > 3:
        raise ew.Unsupported(f"{name} over {dim!r}: one dimension, given as an int, is what the template reduces")
    if not -args[0].dim() <= dim < args[0].dim():
        return None
    op = _REDUCTIONS[name]
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
                   params=(("op", op), ("dim", dim), ("keepdim", keepdim), ("neutral", _NEUTRAL[op])))


def _row_scan(gm, model, args) -> Pattern | None:
    """A forward that is a cumulative sum or product along the last dimension of its float32 input,
    possibly reversed (``x.flip(d).cumsum(d).flip(d)``) or of ``x * mask`` with a second input of
    x's shape (bool or float). None when the forward is anything else."""
    import operator

    import torch

    if not 1 <= len(args) <= 2 or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    x = args[0]
    if x.dtype != torch.float32 or x.dim() < 1 or any(tuple(a.shape) != tuple(x.shape) for a in args[1:]):
        return None
    placeholders = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    last = {-1, x.dim() - 1}

    def flips(node, source) -> bool:
        return (_op_name(node) == "flip" and node.args[:1] == (source,)
                and _single(_param(node, "dims", 1)) in last)

    scans = [n for n in calls if _op_name(n) in ("cumsum", "cumprod")]
    if len(scans) != 1:
        return None
    (scan,) = scans
    dim = _param(scan, "dim", 1)
    if dim not in last:
        raise ew.Unsupported(f"{_op_name(scan)} over dim {dim!r}: the template scans the last dimension")
    source, rest = scan.args[0], [n for n in calls if n is not scan]
    reverse = masked = False
    if rest and len(rest) == 2 and flips(rest[0], placeholders[0]) and source is rest[0] and flips(rest[1], scan):
        reverse, source, rest = True, placeholders[0], []
    if (len(rest) == 1 and len(args) == 2 and rest[0] is source and rest[0].op == "call_function"
            and rest[0].target in (operator.mul, torch.mul) and set(rest[0].args) == set(placeholders)):
        masked, source, rest = True, placeholders[0], []
    if rest or source is not placeholders[0] or len(args) != 1 + masked:
        return None
    op = _op_name(scan)
    return Pattern("scan", inputs=len(args), ops=(op,),
                   params=(("op", op), ("reverse", reverse), ("masked", masked),
                           ("neutral", "0.0" if op == "cumsum" else "1.0")))


def _normalize(gm, model, args) -> Pattern | None:
    """``x / s`` where ``s`` is a statistic of x over one dimension, kept for broadcasting: the sum or
    mean of x, |x| or x**2 (or ``torch.norm(x, p=2, dim, keepdim=True)``), then constants added and
    square roots taken (RMSNorm, L1 and L2 normalization). None when the forward is anything else."""
    import operator

    import torch

    if not _one_float_input(args):
        return None
    (x,) = _inputs(gm)
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    div = out.args[0]
    if not (hasattr(div, "op") and div.op == "call_function" and div.target in (operator.truediv, torch.div)
            and len(div.args) == 2 and div.args[0] is x and hasattr(div.args[1], "op") and not div.kwargs):
        return None
    chain, node = [], div.args[1]  # from the statistic back to x
    while node is not x:
        inputs = node.all_input_nodes
        if len(inputs) != 1 or node.op not in ("call_function", "call_method"):
            return None
        chain.append(node)
        node = inputs[0]
    chain.reverse()
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != len(chain) + 1:
        return None  # something else is computed beside the statistic

    pre, ops = "x", []
    first = chain[0] if chain else None
    if first is not None and (_op_name(first) in ("pow", "square") and first.args[1:] in ((2,), ()) or
                              first.target is operator.mul and first.args == (x, x)):
        pre, ops, chain = "x * x", ["square"], chain[1:]
    elif first is not None and _op_name(first) == "abs":
        pre, ops, chain = "tl.abs(x)", ["abs"], chain[1:]
    if not chain:
        return None
    reduce = chain[0]
    dim, keepdim = _single(_param(reduce, "dim", 1)), _param(reduce, "keepdim", 2, False)
    post, mean = "stat", False
    if _op_name(reduce) in ("sum", "mean"):
        mean = _op_name(reduce) == "mean"
        ops.append(_op_name(reduce))
    elif _op_name(reduce) == "norm" and pre == "x" and reduce.kwargs.get("p", 2) == 2 and len(reduce.args) == 1:
        pre, post = "x * x", "tl.sqrt(stat)"
        ops.append("norm2")
    else:
        return None
    if not isinstance(dim, int) or isinstance(dim, bool) or keepdim is not True:
        raise ew.Unsupported("a statistic over one dimension, kept (keepdim=True), is what the template divides by")
    if not -args[0].dim() <= dim < args[0].dim():
        return None
    for step in chain[1:]:
        if step.target in (operator.add, torch.add) and len(step.args) == 2 and step.args[0] is not None \
                and not hasattr(step.args[1], "op"):
            post, op = f"({post} + {ew.literal(step.args[1])})", "add"
        elif _op_name(step) in ("sqrt",):
            post, op = f"tl.sqrt({post})", "sqrt"
        else:
            return None
        ops.append(op)
    text = {("x * x", True): "the mean of x**2", ("x * x", False): "the sum of x**2",
            ("tl.abs(x)", True): "the mean of |x|", ("tl.abs(x)", False): "the sum of |x|",
            ("x", True): "the mean of x", ("x", False): "the sum of x"}[(pre, mean)]
    if post != "stat":
        text += f", s, then {post.replace('stat', 's').replace('tl.', '')}"
    return Pattern("norm", inputs=1, ops=tuple(ops + ["div"]),
                   params=(("dim", dim), ("pre", pre), ("mean", mean), ("post", post), ("stat_text", text)))


def _pooling(gm, model, args) -> Pattern | None:
    """A forward that is one nn.MaxPool{1,2,3}d or nn.AvgPool{1,2,3}d module on its float32 input
    (no ceil mode, no indices returned, no divisor override). None when it is anything else."""
    import torch.nn as nn

    if not _one_float_input(args):
        return None
    (x,) = _inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_module" or calls[0].args != (x,):
        return None
    pool = gm.get_submodule(calls[0].target)
    kinds = {nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3, nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3}
    ndim = kinds.get(type(pool))
    if ndim is None:
        return None
    is_max = isinstance(pool, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d))
    if pool.ceil_mode or (is_max and pool.return_indices) or getattr(pool, "divisor_override", None):
        raise ew.Unsupported(f"{type(pool).__name__} with ceil_mode, return_indices or divisor_override")
    if args[0].dim() not in (ndim + 1, ndim + 2):
        return None

    def triple(value, fill):
        value = tuple(value) if isinstance(value, (tuple, list)) else (value,) * ndim
        return (fill,) * (3 - ndim) + tuple(int(v) for v in value)

    kernel = triple(pool.kernel_size, 1)
    stride = triple(pool.stride if pool.stride not in (None, (), []) else pool.kernel_size, 1)
    padding, dilation = triple(pool.padding, 0), triple(pool.dilation if is_max else 1, 1)
    name = type(pool).__name__
    return Pattern("pool", inputs=1, ops=(name.lower(),),
                   params=(("module", name), ("ndim", ndim), ("is_max", is_max),
                           ("include_pad", bool(getattr(pool, "count_include_pad", True))),
                           ("kernel", kernel[3 - ndim:]), ("stride", stride[3 - ndim:]),
                           ("padding", padding[3 - ndim:]), ("dilation", dilation[3 - ndim:]),
                           ("kernel3", kernel), ("stride3", stride), ("padding3", padding), ("dilation3", dilation)))


def _chain(gm, model, nodes, exprs: dict, count: int, shape: tuple[int, ...] | None) -> Pattern:
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
        expr, op = _expr(gm, node, exprs)
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
        _check_operand(model, target, shape)
    return Pattern("elementwise", inputs=count, expr=exprs[result.name], ops=tuple(ops),
                   body=tuple(body), operands=tuple(operands))


def _check_operand(model, target: str, shape: tuple[int, ...]) -> None:
    """The model's tensor at attribute path ``target`` (a parameter, buffer or plain tensor attribute,
    which ModelNew will hold under the same path) is float32 and broadcasts against ``shape`` the one
    way the kernel indexes it."""
    import torch

    try:
        value = functools.reduce(getattr, target.split("."), model)
    except AttributeError:
        raise ew.Unsupported(f"a tensor made in forward ({target}), not an attribute of the model") from None
    if not isinstance(value, torch.Tensor):
        raise ew.Unsupported(f"model attribute {target!r} is a {type(value).__name__} after tracing, not a tensor "
                             "(does forward reassign it?)")
    if value.dtype != torch.float32:
        raise ew.Unsupported(f"model tensor {target!r} is {value.dtype}, not float32")
    if ew.broadcast_run(shape, tuple(value.shape)) is None:
        raise ew.Unsupported(f"model tensor {target!r} of shape {tuple(value.shape)} does not broadcast against "
                             f"the input shape {shape} as one contiguous run of dimensions")


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


def _softmax_dim(gm, node):
    """The dim of a softmax or log-softmax node (function, method or module), else None."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if node.op == "call_function" and node.target in (torch.softmax, F.softmax, torch.log_softmax, F.log_softmax):
        return _param(node, "dim", 1)
    if node.op == "call_method" and node.target in ("softmax", "log_softmax"):
        return _param(node, "dim", 1)
    if node.op == "call_module" and isinstance(gm.get_submodule(node.target), (nn.Softmax, nn.LogSoftmax)):
        return gm.get_submodule(node.target).dim
    return None


def _is_log_softmax(gm, node) -> bool:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if node.op == "call_module":
        return isinstance(gm.get_submodule(node.target), nn.LogSoftmax)
    return node.target in (torch.log_softmax, F.log_softmax, "log_softmax")


def _arg(value, exprs) -> str:
    return exprs[value.name] if hasattr(value, "name") else ew.literal(value)


def _expr(gm, node, exprs) -> tuple[str, str]:
    if node.op == "call_module":
        return _module_expr(gm.get_submodule(node.target), _arg(node.args[0], exprs))
    if node.op not in ("call_function", "call_method"):
        raise ew.Unsupported(f"{node.op} {node.target}")
    target, args, kw = node.target, node.args, node.kwargs
    if target in ew.BINARY and len(args) == 2 and not kw:
        op = getattr(target, "__name__", str(target))
        return ew.BINARY[target].format(a=_arg(args[0], exprs), b=_arg(args[1], exprs)), op
    a = _arg(args[0], exprs)
    name = ew.FUNCTIONS.get(target) if node.op == "call_function" else target
    if name == "gelu" and kw.get("approximate", "none") == "tanh":
        return _gelu_tanh(a), "gelu_tanh"
    if name in ew.UNARY:
        return ew.UNARY[name].format(a=a), name
    return _special(target, args, kw, a)


def _special(target, args, kw, a) -> tuple[str, str]:
    import torch
    import torch.nn.functional as F

    if target in (F.leaky_relu, "leaky_relu"):
        return ew.leaky_relu(a, kw.get("negative_slope", args[1] if len(args) > 1 else 0.01)), "leaky_relu"
    if target in (torch.clamp, "clamp", torch.clip, "clip"):
        lo = kw.get("min", args[1] if len(args) > 1 else None)
        hi = kw.get("max", args[2] if len(args) > 2 else None)
        return ew.clamp(a, lo, hi), "clamp"
    if target in (F.hardtanh,):
        return ew.clamp(a, kw.get("min_val", -1.0), kw.get("max_val", 1.0)), "hardtanh"
    if target in (operator.pow, torch.pow, "pow") and len(args) == 2 and not hasattr(args[1], "name"):
        power = args[1]
        if isinstance(power, (int, float)) and not isinstance(power, bool) and float(power) in (2.0, 3.0, 4.0):
            return "(" + " * ".join([a] * int(power)) + ")", "square" if power == 2 else f"pow{int(power)}"
        if power == 0.5:
            return f"tl.sqrt({a})", "sqrt"
        raise ew.Unsupported(f"pow with exponent {power!r} (2, 3, 4 and 0.5 are expressed)")
    raise ew.Unsupported(f"operation {getattr(target, '__name__', target)}")


def _module_expr(sub, a: str) -> tuple[str, str]:
    import torch.nn as nn

    if isinstance(sub, nn.LeakyReLU):
        return ew.leaky_relu(a, sub.negative_slope), "leaky_relu"
    if isinstance(sub, nn.Hardtanh):
        return ew.clamp(a, sub.min_val, sub.max_val), "hardtanh"
    if isinstance(sub, nn.GELU) and sub.approximate == "tanh":
        return _gelu_tanh(a), "gelu_tanh"
    name = ew.MODULES.get(type(sub))
    if name is None:
        weights = " with parameters" if any(True for _ in sub.parameters()) else ""
        raise ew.Unsupported(f"module {type(sub).__name__}{weights}")
    return ew.UNARY[name].format(a=a), name


def _gelu_tanh(a: str) -> str:
    inner = f"(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))"
    return f"(0.5 * {a} * (1.0 + {ew.UNARY['tanh'].format(a=inner)}))"
