"""Reading a problem's forward as a torch.fx graph: tracing it as it is called (refusing a forward
that draws random numbers), and the small questions the detectors and the partitioner ask of its
nodes."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew


def trace_as_called(model, args):
    """``model``'s forward as an FX graph of the call ``model(*args)``, composite operations (losses,
    instance norm) written out as primitive ones (:mod:`.decompose`), every in-place write in
    it (augmented assignment too) and those no one sees rewritten out of place
    (:mod:`.functionalize`). Parameters the inputs leave
    out (an LSTM's ``h0=None``, NetVLAD's ``mask=None``) are fixed at their defaults, so control
    flow on them is traced the way the call takes it (FX's ``concrete_args``), and their
    placeholders and FX's guards on them are dropped: the graph takes exactly ``args``.

    Raises:
        ew.Unsupported: a parameter the inputs leave out has no default.
        Exception: whatever FX raises for a forward it cannot trace.
    """
    import inspect

    from loopwise.kernels.expert.decompose import decompose
    from loopwise.kernels.expert.functionalize import functionalize

    named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    left = [p for p in list(inspect.signature(model.forward).parameters.values())[len(args):] if p.kind in named]
    if any(p.default is inspect.Parameter.empty for p in left):
        raise ew.Unsupported(f"forward takes {', '.join(p.name for p in left)} beyond the {len(args)} input(s) given, "
                             "without defaults")
    if not left:
        return functionalize(_deterministic(decompose(_trace(model, None, args), args)), args)
    gm = _trace(model, {p.name: p.default for p in left}, args)
    placeholders = graph_inputs(gm)
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
    return functionalize(_deterministic(decompose(gm, args)), args)


def _trace(model, concrete_args, args):
    """``trace(model)``, or where fx cannot trace the forward symbolically (it computes with a size,
    ``math.sqrt(x.size(-1))``; slices a buffer by one; branches on a shape or a device), the trace
    shaped by ``args`` (sizes as numbers), which takes such a forward. The first failure is raised
    where the shaped trace fails too."""
    from loopwise.kernels.expert.functionalize import trace

    try:
        gm = trace(model, concrete_args)
    except ew.Unsupported:
        raise
    except Exception as plain:  # noqa: BLE001 - fx's refusals are TypeErrors, TraceErrors, RuntimeErrors
        if _holds_proxies(model):  # the failed trace assigned its proxies to the model: no clean retry
            raise
        try:
            return trace(model, concrete_args, inputs=args)
        except ew.Unsupported:
            raise
        except Exception:  # noqa: BLE001 - the symbolic trace's reason is the one to report
            raise plain from None
    if not _baked_from_state(gm) or _holds_proxies(model):
        return gm
    try:  # the shaped trace reads the buffers through the graph
        return trace(model, concrete_args, inputs=args)
    except Exception:  # noqa: BLE001 - the symbolic trace stands
        return gm


def _baked_from_state(gm) -> bool:
    """Whether the symbolic trace computed a tensor from the model's buffers while tracing (fx reads
    a buffer as the tensor itself: ``self.mask[:, :, :19, :45] == 0`` with constant bounds is then
    a tensor of the trace, on the meta device where the capture builds the model, which a standalone
    file cannot write down)."""
    return any(traced_constant(node) and getattr(getattr(gm, node.target, None), "is_meta", False)
               for node in gm.graph.nodes)


def traced_constant(node) -> bool:
    """Whether ``node`` reads a tensor fx made a constant of the trace (``_tensor_constant0``): fx's
    tracer sets these on the traced model itself, so only the name tells them apart."""
    import re

    return node.op == "get_attr" and re.fullmatch(r"_tensor_constant\d+", node.target) is not None


def _holds_proxies(model) -> bool:
    """Whether a module of ``model`` holds an fx proxy in an attribute (directly or in a list, tuple
    or dict): a forward that assigns ``self.h = ...`` before the point where a trace fails leaves
    the dead trace's value there, which a second trace would read."""
    import torch.fx as fx

    def holds(value, depth=0):
        if isinstance(value, fx.Proxy):
            return True
        if depth < 2 and isinstance(value, (list, tuple)):
            return any(holds(v, depth + 1) for v in value)
        if depth < 2 and isinstance(value, dict):
            return any(holds(v, depth + 1) for v in value.values())
        return False

    return any(holds(v) for module in model.modules() for v in vars(module).values())


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


def meta_model(module):
    """(``module``'s Model, its inputs), both on the meta device: no memory, no kernels. An
    ``__init__`` that reads a value of a tensor it makes (Swin's ``[x.item() for x in
    torch.linspace(...)]``) cannot run there: that model is built on the CPU, then moved."""
    import torch

    with torch.device("meta"):
        args = list(module.get_inputs())
        try:
            return module.Model(*module.get_init_inputs()), args
        except (RuntimeError, NotImplementedError) as error:
            if "meta" not in str(error):
                raise
    return module.Model(*module.get_init_inputs()).to("meta"), args


def graph_inputs(gm) -> list:
    """The traced forward's input nodes (its placeholders), in order: exactly the inputs it was
    called with (trace_as_called fixes any others at their defaults)."""
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def one_float_input(args, ndim: int | None = None) -> bool:
    """The forward takes one float32 tensor (of ``ndim`` dimensions when given, at least one)."""
    import torch

    return (len(args) == 1 and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.float32
            and args[0].dim() >= 1 and (ndim is None or args[0].dim() == ndim))


def op_name(node) -> str:
    """A call's name, whether a function (``torch.sum``) or a method (``x.sum``)."""
    return node.target if node.op == "call_method" else getattr(node.target, "__name__", "")


def call_arg(node, name: str, position: int, default=None):
    """A call's argument given by keyword or by position."""
    return node.kwargs.get(name, node.args[position] if len(node.args) > position else default)


def single(value):
    """``dim=(1,)`` as ``1``; anything else as given."""
    return value[0] if isinstance(value, (tuple, list)) and len(value) == 1 else value


def flip_dim(node, source, rank: int) -> int | None:
    """The one dimension (counted from 0) along which ``node`` flips ``source``, a tensor of ``rank``
    dimensions (``torch.flip(source, [d])``, ``source.flip(d)``), else None."""
    if op_name(node) != "flip" or node.args[:1] != (source,) or len(node.args) > 2 or set(node.kwargs) - {"dims"}:
        return None
    along = single(call_arg(node, "dims", 1))
    if not isinstance(along, int) or isinstance(along, bool) or not -rank <= along < rank:
        return None
    return along % rank


def zero_padding(conv) -> bool:
    """Whether a convolution module pads with zeros by amounts given as numbers (not ``"same"``),
    as the implicit-GEMM templates read their input."""
    return conv.padding_mode == "zeros" and not isinstance(conv.padding, str)

