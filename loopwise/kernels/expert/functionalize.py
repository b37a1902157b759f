"""In-place writes in a traced forward: augmented assignment recorded as it runs, and the writes no
one can see rewritten out of place.

torch.fx's Proxy has no ``__iadd__``, so Python runs ``x += y`` as ``x = x + y`` while tracing:
the write is lost, and a name that still holds the old tensor (``z = x`` before it, a view of x)
reads the value before the write though the forward reads it after. :func:`trace` records
``operator.iadd`` and its kin instead (and ``x[i] = y``, which fx cannot trace at all, as
``operator.setitem``), so the graph holds every write the forward makes.

A write is *private* where nothing reads the memory it writes afterwards except through the
write's own result: the tensor written is not read again under its old name or through a view
(an alias: an operation named as a view, or one whose output shares its input's storage when the
forward runs on the meta device, :func:`viewed`), and it is not the model's state (a parameter or
buffer, which the next call would see). A private write computes the same program out of place,
so :func:`functionalize` rewrites it so (``operator.iadd`` as ``operator.add``, ``x.add_(y)`` as
``x.add(y)``, ``torch.relu_`` as ``torch.relu``, ``inplace=True`` dropped), keeping the dtype of
the tensor written (a write casts to it). ResNet's ``out += identity`` and VGG's
``ReLU(inplace=True)`` are private; a write to a forward input is not (its caller reads it). The writes left (:func:`visible_writes`) are seen by a later
read: only a plan that keeps each where PyTorch runs it (the partitioner, :mod:`.partition.writes`)
can compute such a forward.
"""

from __future__ import annotations

import functools
import operator

# augmented assignment and its out-of-place operation
AUGMENTED = {"iadd": "add", "isub": "sub", "imul": "mul", "itruediv": "truediv", "ifloordiv": "floordiv",
             "imod": "mod", "ipow": "pow", "iand": "and_", "ior": "or_", "ixor": "xor", "ilshift": "lshift",
             "irshift": "rshift", "imatmul": "matmul"}

_AUGMENTED_OPERATORS = frozenset(getattr(operator, name) for name in AUGMENTED)

# Tensor methods ending in "_" whose name without it is not the same operation out of place
_NO_OUT_OF_PLACE = frozenset({"copy_", "fill_", "zero_", "resize_", "resize_as_", "set_", "requires_grad_",
                              "share_memory_", "put_", "index_put_", "retain_grad_", "record_stream_"})


def trace(model, concrete_args=None, inputs=None):
    """``model``'s forward as an fx GraphModule, augmented assignment recorded as a write.

    With ``inputs`` (the call's arguments), the trace is *shaped*: every traced tensor carries its
    value on the meta device, so the shapes, dtypes and sizes the forward reads from it are numbers
    and the graph holds them as constants (``B, T, C = x.size()`` then ``math.sqrt(C)``, a buffer
    sliced by ``T``, a branch on a shape), and the model's buffers are graph attributes. The graph
    is then only right for inputs of these shapes, which is what a problem's inputs are.

    Raises:
        ew.Unsupported: the forward writes a parameter, buffer or tensor attribute of the model in
            place (fx runs that write on the tensor itself rather than recording it, and the next
            call would read it written).
    """
    import torch.fx as fx

    from loopwise.kernels.expert import einops_trace
    from loopwise.kernels.expert import elementwise as ew
    from loopwise.kernels.problem import MODELS_IN_PROCESS

    einops_trace.register()
    state = _state(model)
    versions = {name: t._version for name, t in state.items()}
    tracer = _tracer_class()() if inputs is None else _shaped_tracer_class()(inputs)
    with MODELS_IN_PROCESS:
        graph = tracer.trace(model, concrete_args)
    written = [name for name, t in state.items() if t._version != versions[name]]
    if written:
        raise ew.Unsupported(f"the forward writes the model's {', '.join(written)} in place: its state changes "
                             "from call to call")
    if inputs is not None:
        graph.lint()  # every node it reads is its own
        _nothing_of_the_shadows(graph, state)
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


def _nothing_of_the_shadows(graph, state: dict) -> None:
    """Raises where a shaped trace kept something of its meta values in the graph: a tensor made
    outside the trace from numbers (fx keeps it as a constant of the graph; ``state`` holds the
    model's own tensors, the only ones a graph may read) or the meta device as a value. A traced
    tensor's device is a call in the graph (``x.device``), read where the forward runs."""
    import torch
    from torch.fx.node import map_aggregate

    def check(value):
        if isinstance(value, torch.device) and value.type == "meta" or isinstance(value, str) and value == "meta":
            raise TypeError("the forward passes the meta device on as a value")
        return value

    for node in graph.nodes:
        if node.op == "get_attr" and node.target not in state:
            raise TypeError(f"the forward makes a tensor from numbers outside the trace ({node.target})")
        map_aggregate((node.args, node.kwargs), check)


def _state(model) -> dict:
    """{name: tensor} of the model's parameters, buffers and plain tensor attributes."""
    import torch

    state = dict(model.named_parameters()) | dict(model.named_buffers())
    for prefix, sub in model.named_modules():
        for name, value in vars(sub).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                state.setdefault(f"{prefix}.{name}" if prefix else name, value)
    return state


# The attributes fx's own proxies set on themselves (Proxy: tracer, node; Attribute: root, attr, _node)
_PROXY_FIELDS = frozenset({"tracer", "node", "root", "attr", "_node"})


def _augments(proxy, k, value) -> bool:
    """Whether ``value`` is the augmented assignment recorded on ``proxy``'s attribute ``k``
    (``x.k += y``, which Python ends by assigning ``x.k`` the result: the tensor written)."""
    node = getattr(value, "node", None)
    if getattr(node, "op", None) != "call_function" or node.target not in _AUGMENTED_OPERATORS:
        return False
    target = node.args[0]
    return (getattr(target, "op", None) == "call_function" and target.target is getattr
            and target.args == (proxy.node, k))


@functools.lru_cache(maxsize=1)
def _tracer_class():
    """An fx Tracer whose proxies record augmented assignment (built on first use: torch.fx loads lazily)."""
    import torch.fx as fx

    class AugmentedProxy(fx.Proxy):
        """A Proxy on which ``x += y`` records ``operator.iadd(x, y)`` (whose result the name then holds)
        and ``x[i] = y`` records ``operator.setitem(x, i, y)``; so do its attributes (``x.data += y``).
        Assigning an attribute (``x.data = y``, which changes x's values) cannot be recorded: it
        raises, so the forward gets no candidate."""

        def __getattr__(self, k):
            return AugmentedAttribute(self, k)

        def __setattr__(self, k, value):
            if k in _PROXY_FIELDS:
                super().__setattr__(k, value)
            elif not _augments(self, k, value):  # ``x.data += y`` ends with ``x.data = <the write>``: a no-op
                raise TypeError(f"the forward assigns {k!r} of a traced tensor (x.{k} = ...): a write fx cannot record")

    class AugmentedAttribute(fx.proxy.Attribute, AugmentedProxy):
        """An attribute of a proxy (``x.data``, ``x.T``), recording writes as its proxy does."""

    def augmented(op):
        def method(self, other):
            return self.tracer.create_proxy("call_function", op, (self, other), {})
        return method

    for name in AUGMENTED:
        setattr(AugmentedProxy, f"__{name}__", augmented(getattr(operator, name)))

    def setitem(self, key, value):  # ``x[i] = v``: a write (Proxy has no __setitem__ either)
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})

    AugmentedProxy.__setitem__ = setitem

    class Tracer(fx.Tracer):
        def proxy(self, node):
            return AugmentedProxy(node, self)

        def create_arg(self, a):
            # ``dtype=bool`` (or int, float): the torch dtype PyTorch reads it as; fx takes no
            # Python type as an argument
            if isinstance(a, type) and a in _PYTHON_DTYPES:
                import torch

                return getattr(torch, _PYTHON_DTYPES[a])
            return super().create_arg(a)

    Tracer.proxy_class = AugmentedProxy
    return Tracer


# Python's types as PyTorch reads them where a dtype is asked for
_PYTHON_DTYPES = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}


# What a shaped trace reads from a tensor's meta value as a number rather than recording a call: its
# sizes and dtype, which are the real tensor's. Not its device (meta, not the GPU it runs on) nor
# its strides (a meta kernel's layout need not be the GPU kernel's): those stay calls in the graph,
# and a branch on them fails the trace.
_SHAPE_READS = frozenset({"shape", "dtype", "ndim", "is_floating_point", "size", "dim", "numel", "nelement",
                          "ndimension", "element_size"})


# Calls that can put a tensor on another device than its inputs'
_MOVES = frozenset({"to", "cpu", "cuda", "copy_", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"})


def _reads_device(node) -> bool:
    """``node`` reads the ``.device`` of a traced tensor computed from the forward's inputs and the
    model's tensors by calls none of which can move it (no ``.to``, ``.cpu``, ``device=``): such a
    tensor lives where the inputs and weights do."""
    if not (getattr(node, "op", None) == "call_function" and node.target is getattr and node.args[1:] == ("device",)):
        return False
    seen, frontier = set(), [node.args[0]]
    while frontier:
        n = frontier.pop()
        if n in seen or not hasattr(n, "op"):
            continue
        seen.add(n)
        if n.target in _MOVES or "device" in n.kwargs or getattr(n.target, "__name__", "") in _MOVES:
            return False
        frontier.extend(a for a in n.all_input_nodes)
    return True


@functools.lru_cache(maxsize=1)
def _shaped_tracer_class():
    """The Tracer of :func:`_tracer_class` whose proxies carry their value on the meta device
    (``node.meta["meta_value"]``, or None where it could not be computed) and answer a shape
    question with it; the model's buffers are proxies too (fx otherwise slices them eagerly)."""
    import copy

    import torch
    from torch.fx.node import map_aggregate

    base = _tracer_class()
    augmented = base.proxy_class

    def value_of(proxy):
        return proxy.node.meta.get("meta_value")

    class ShapedProxy(augmented):
        def __getattr__(self, k):
            value = value_of(self)
            if k in _SHAPE_READS and isinstance(value, torch.Tensor):  # an attribute, or a method to call
                return getattr(value, k)
            return ShapedAttribute(self, k)

        def __len__(self):
            value = value_of(self)
            if isinstance(value, (torch.Tensor, tuple, list)):
                return len(value)
            return super().__len__()

        def __iter__(self):
            value = value_of(self)
            if isinstance(value, (tuple, list)) or isinstance(value, torch.Tensor) and value.dim() > 0:
                return iter([self[i] for i in range(len(value))])
            return super().__iter__()

        def __bool__(self):
            # ``x.device != self.w.device``: the only branch on a device answered, and answered
            # "one device" (a problem's inputs and weights live on one); any other raises
            node = self.node
            if (node.op == "call_function" and node.target in (operator.eq, operator.ne) and len(node.args) == 2
                    and all(_reads_device(a) for a in node.args)):
                return node.target is operator.eq
            return super().__bool__()

    # An attribute of a shaped proxy: fx's Attribute (its node made on first use) answering shape
    # questions as a ShapedProxy does.
    ShapedAttribute = type("ShapedAttribute", (torch.fx.proxy.Attribute, ShapedProxy), {})

    class ShapedTracer(base):
        proxy_buffer_attributes = True

        def __init__(self, inputs):
            super().__init__()
            self._inputs = [a.to("meta").clone() if isinstance(a, torch.Tensor) else a for a in inputs]  # the caller's stay
            self._placeholders = 0
            self._modules = {}
            self._computing = False

        def call_module(self, m, forward, args, kwargs):
            if self._computing:  # a module inside one whose value is being computed: just run it
                return forward(*args, **kwargs)
            return super().call_module(m, forward, args, kwargs)

        def getattr(self, attr, attr_val, parameter_proxy_cache):
            if self._computing:  # a parameter or buffer read while a value is computed: the tensor itself
                return attr_val
            return super().getattr(attr, attr_val, parameter_proxy_cache)

        def proxy(self, node):
            return ShapedProxy(node, self)

        def create_proxy(self, kind, target, args, kwargs, *rest, **more):
            proxy = super().create_proxy(kind, target, args, kwargs, *rest, **more)
            self._computing = True
            try:
                proxy.node.meta["meta_value"] = self._value(kind, target, args, kwargs)
            except Exception:  # noqa: BLE001 - an operation without a meta kernel: the shape stays symbolic
                proxy.node.meta["meta_value"] = None
            finally:
                self._computing = False
            return proxy

        def _value(self, kind, target, args, kwargs):
            if kind == "placeholder":
                index, self._placeholders = self._placeholders, self._placeholders + 1
                return self._inputs[index] if index < len(self._inputs) else None
            if kind == "get_attr":
                value = self.root
                for part in target.split("."):
                    value = getattr(value, part)
                return value

            def unwrap(a):
                if isinstance(a, torch.fx.Proxy):
                    value = value_of(a)
                    if value is None:
                        raise LookupError("no value")
                    return value
                return a

            args, kwargs = map_aggregate(args, unwrap), map_aggregate(kwargs, unwrap)
            if kind == "call_function":
                return target(*args, **kwargs)
            if kind == "call_method":
                return getattr(args[0], target)(*args[1:], **kwargs)
            if kind == "call_module":  # a copy: a module's own state (BatchNorm's statistics) stays as it was
                if target not in self._modules:
                    self._modules[target] = copy.deepcopy(self.root.get_submodule(target))
                return self._modules[target](*args, **kwargs)
            return None

    return ShapedTracer


def out_of_place(node):
    """(op, target, args, kwargs) of the out-of-place call that computes what the in-place write
    ``node`` does, or None when ``node`` writes nothing in place or has no such call."""
    import torch
    import torch.nn.functional as F

    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if node.op == "call_function" and node.target in _AUGMENTED_OPERATORS:
        return "call_function", getattr(operator, AUGMENTED[name]), node.args, node.kwargs
    position = _inplace_position(node)
    if position is not None:
        if position == "inplace":
            return node.op, node.target, node.args, {k: v for k, v in node.kwargs.items() if k != "inplace"}
        return node.op, node.target, (*node.args[:position], False, *node.args[position + 1:]), node.kwargs
    if not isinstance(name, str) or not name.endswith("_") or name.startswith("_") or name in _NO_OUT_OF_PLACE:
        return None
    if node.op == "call_method" and callable(getattr(torch.Tensor, name[:-1], None)):
        return "call_method", name[:-1], node.args, node.kwargs
    for namespace in (torch, F):
        if node.op == "call_function" and getattr(namespace, name, None) is node.target and callable(
                getattr(namespace, name[:-1], None)):
            return "call_function", getattr(namespace, name[:-1]), node.args, node.kwargs
    return None


def _inplace_position(node):
    """Where a function call passes ``inplace=True`` ("inplace" as a keyword, else its position),
    or None."""
    if node.op != "call_function":
        return None
    if node.kwargs.get("inplace") is True:
        return "inplace"
    try:
        position = _inplace_parameter(node.target)
    except TypeError:  # an unhashable target
        return None
    return position if position is not None and len(node.args) > position and node.args[position] is True else None


@functools.lru_cache(maxsize=None)
def _inplace_parameter(function):
    """The position of ``function``'s ``inplace`` parameter, or None."""
    import inspect

    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("inplace") if "inplace" in names else None


def writes_in_place(gm, node) -> bool:
    """Whether ``node`` writes memory in place: augmented assignment, ``setitem``, a Tensor method
    or torch function ending in ``_``, ``inplace=True`` (a keyword, a position, a module's
    attribute), ``out=``, an ATen operator whose schema writes an argument."""
    if node.op not in ("call_function", "call_method", "call_module"):
        return False
    if node.op == "call_module":
        return bool(getattr(gm.get_submodule(node.target), "inplace", False))
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if node.op == "call_function" and getattr(node.target, "__module__", "") in ("_operator", "operator"):
        return name in AUGMENTED or name == "setitem"
    underscored = isinstance(name, str) and name.endswith("_") and not name.startswith("_")
    return (underscored or node.kwargs.get("out") is not None or _inplace_position(node) is not None
            or _schema_writes(node.target))


def _schema_writes(target) -> bool:
    """Whether ``target`` is an ATen operator overload (``torch.ops.aten.relu_.default``) whose
    schema marks an argument written (``Tensor(a!)``)."""
    schema = getattr(target, "_schema", None)
    return any(getattr(getattr(a, "alias_info", None), "is_write", False) for a in getattr(schema, "arguments", ()))


# Operations whose output may share its input's memory (views, and what returns its input itself).
_VIEWS = frozenset({"getitem", "narrow", "view", "view_as", "reshape", "flatten", "unflatten", "permute", "transpose",
                    "swapaxes", "swapdims", "t", "contiguous", "expand", "expand_as", "squeeze", "unsqueeze", "select",
                    "chunk", "split", "unbind", "tensor_split", "split_with_sizes", "diagonal", "movedim", "moveaxis",
                    "detach", "unfold", "as_strided", "real", "imag", "view_as_real", "view_as_complex", "dropout",
                    "alpha_dropout", "type_as", "to", "float", "half", "bfloat16", "double", "T", "mT", "align_as",
                    "getattr"})
_VIEW_MODULES = frozenset({"Identity", "Flatten", "Unflatten", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
                           "AlphaDropout"})


def is_view(gm, node) -> bool:
    """Whether ``node``'s output may share its first argument's memory (by the operation's name)."""
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)).__name__ in _VIEW_MODULES
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    return node.op in ("call_function", "call_method") and name in _VIEWS


# node.meta key: the positions in a node's args of the inputs whose memory its output shares, as
# the forward run on the meta device shows (``ravel``, ``broadcast_to``, ``positive``, a transposing
# ``einsum``, ``broadcast_tensors``: views and operations that return their input, whatever their name)
SHARES = "loopwise_shares_memory_of"


def viewed(gm, node) -> list:
    """The input nodes whose memory ``node``'s output may share (a view's base, an operation that
    returns its input, an in-place write's target)."""
    found = [node.args[i] for i in node.meta.get(SHARES, ()) if i < len(node.args) and hasattr(node.args[i], "op")]
    if node.args and hasattr(node.args[0], "op") and is_view(gm, node) and node.args[0] not in found:
        found.append(node.args[0])
    return found


def _mark_shared_memory(gm, values) -> None:
    """Records (:data:`SHARES`) which inputs' memory each node's output shares, from ``values``
    (the forward run on the meta device, where a view or a returned input keeps its storage)."""
    for node in gm.graph.nodes:
        made = _storages(values.get(node))
        shared = tuple(i for i, arg in enumerate(node.args) if hasattr(arg, "op") and made & _storages(values.get(arg)))
        if shared:
            node.meta[SHARES] = shared


def _storages(value) -> set:
    """The storages (by identity) of a tensor or of the tensors of a tuple or list."""
    import torch

    values = value if isinstance(value, (tuple, list)) else (value,)
    return {v.untyped_storage()._cdata for v in values if isinstance(v, torch.Tensor)}


def memory_of(gm, node, through=None) -> set:
    """The nodes whose memory ``node`` may be: through views (:func:`viewed`) and the in-place
    writes ``through`` says (by default every write that returns its target) to the nodes that
    made it."""
    through = through or (lambda n: writes_in_place(gm, n) and _returns_written(n))
    roots, frontier, seen = set(), [node], set()
    while frontier:
        node = frontier.pop()
        if node in seen:
            continue
        seen.add(node)
        bases = viewed(gm, node) or ([node.args[0]] if node.args and hasattr(node.args[0], "op") and through(node)
                                     else [])
        frontier.extend(bases)
        if not bases:
            roots.add(node)
    return roots


def private(gm, write) -> bool:
    """Whether no one sees the in-place ``write`` but through its own result (once the later reads
    of the tensor it writes read that result, :func:`functionalize`): no other node that shares the
    memory it writes and was made before it is read after it (a view, the tensor viewed), and that
    memory is neither the model's (a parameter or buffer keeps the write for the next call) nor the
    caller's (a forward input: the caller reads it after the call)."""
    if not write.args or not hasattr(write.args[0], "op"):
        return False
    written, roots = write.args[0], memory_of(gm, write.args[0])
    if any(root.op in ("get_attr", "placeholder") for root in roots):
        return False
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    at = order[write]
    for node in gm.graph.nodes:
        if order[node] >= at:
            return True
        if node is not written and memory_of(gm, node) & roots and any(order[u] > at for u in node.users):
            return False
    return True


def functionalize(gm, args):
    """``gm`` with the reads of a tensor after an in-place write to it reading the write's result
    (the same memory, named as the forward's dataflow), and its private writes (:func:`private`)
    rewritten out of place (module calls, which cannot be, are left as they are: a private one is an
    out-of-place operation to whoever reads the graph). A write whose out-of-place result would
    take another dtype than the tensor it writes (``half += float``, ``x.gt_(0)`` of a float x)
    stays in place, as does every write of a forward that cannot run on the meta device (which
    also tells which operations return their input's memory, :func:`viewed`); augmented
    assignment to a number (a size) is the operation out of place."""
    import torch

    writes = [n for n in gm.graph.nodes if writes_in_place(gm, n)]
    if not writes:
        return gm
    values = _meta_values(gm, args)
    _mark_shared_memory(gm, values)
    changed = False
    order = {n: i for i, n in enumerate(gm.graph.nodes)}  # the rewrites below change no node's place
    for node in [n for n in writes if _returns_written(n)]:
        written = node.args[0]
        if node.op == "call_function" and node.target in _AUGMENTED_OPERATORS and not isinstance(
                values.get(written), torch.Tensor):
            if written in values:  # a number: ``n += 1`` rebinds n
                node.target, changed = getattr(operator, AUGMENTED[node.target.__name__]), True
                node.meta.pop(SHARES, None)
            continue
        for user in [u for u in written.users if order[u] > order[node]]:
            user.replace_input_with(written, node)
            changed = True
        call = out_of_place(node)
        if call is None or not private(gm, node) or not _keeps_dtype(call, node, values):
            continue
        node.op, node.target, node.args, node.kwargs = call
        node.meta.pop(SHARES, None)  # a fresh tensor now
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


def _returns_written(node) -> bool:
    """Whether the write ``node`` returns the tensor it writes (not ``setitem``, not ``out=``)."""
    return (bool(node.args) and hasattr(node.args[0], "op") and node.kwargs.get("out") is None
            and not (node.op == "call_function" and node.target is operator.setitem))


def visible_writes(gm) -> list:
    """The in-place writes of a functionalized ``gm`` that someone may see (all but private module calls)."""
    return [n for n in gm.graph.nodes if writes_in_place(gm, n) and not (n.op == "call_module" and private(gm, n))]


def _meta_values(gm, args) -> dict:
    """{node: its value} of ``gm`` run on the meta device, or {} where it cannot run there."""
    import torch
    import torch.fx as fx

    interpreter = fx.Interpreter(gm, garbage_collect_values=False)
    try:
        with torch.device("meta"), torch.no_grad():
            interpreter.run(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
    except Exception:  # noqa: BLE001 - an operation without a meta kernel: no write is rewritten
        return {}
    return dict(interpreter.env)


def _keeps_dtype(call, node, values) -> bool:
    """Whether the out-of-place ``call`` gives the dtype of the tensor ``node`` writes (the write casts to it)."""
    import torch

    if not values:
        return False
    written = values.get(node.args[0])
    if not isinstance(written, torch.Tensor):
        return True  # a number: augmented assignment rebinds it
    def value(a):
        return values[a] if hasattr(a, "op") else a
    op, target, args, kwargs = call
    args, kwargs = [value(a) for a in args], {k: value(v) for k, v in kwargs.items()}
    try:
        with torch.device("meta"), torch.no_grad():
            args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
            out = getattr(args[0], target)(*args[1:], **kwargs) if op == "call_method" else target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - not computable out of place on meta: leave the write
        return False
    return isinstance(out, torch.Tensor) and out.dtype == written.dtype
