"""PyTorch models into the memory IR through ``torch.export`` (on the meta device: no weights are
made, so BERT or GPT-2 import in about a second).

The exported graph's ATen operators become loop nests (:mod:`loopwise.memory.ir`):

- convolutions (grouped, strided, dilated, padded; transposed ones with an affine write), linear,
  addmm / mm / bmm / matmul (batch dimensions broadcast), pooling (max, average, adaptive), reductions
  over given dimensions (mean, sum, amax, amin, prod, var, std, logsumexp, any, all);
- elementwise operators with numpy broadcasting; softmax, log-softmax and layer norm, whose row is a
  *coupled* dimension (a tile spans it whole);
- embedding, a gather: modelled as reading distinct rows of the table, the most it can touch;
- copy operators folded into their consumers' access maps, so they move no bytes: view, reshape,
  flatten, transpose, permute, unsqueeze, squeeze, expand, slice, select, split, contiguous,
  clone, dtype casts, eval-mode dropout; a batch norm (eval) after a convolution folds into it
  (its scale into the weights, its shift into a bias, as inference compilers do);
- operators computed from no tensor at all (the attention masks built from ``arange``) are
  *generated*: recomputed where they are read, with no DRAM traffic;
- any other operator is reported by name and counted at least at all its inputs and outputs, each
  whole (its loops walk the largest of them), never dropped.
"""

from __future__ import annotations

from loopwise.errors import UserError
from loopwise.memory.graph import Graph
from loopwise.memory.imported import Imported
from loopwise.memory.ir import Operator, Tensor, linear_walk, opaque_dims
from loopwise.memory.torch_compute import ComputeOperators
from loopwise.memory.torch_copies import IDENTITY, VIEWS, CopyOperators
from loopwise.memory.views import Ref, flat_values, flatten_pairs

ELEMENTWISE = {"add", "sub", "rsub", "mul", "div", "relu", "gelu", "tanh", "sigmoid", "silu", "hardtanh", "hardswish",
               "hardsigmoid", "pow", "clamp", "clamp_min", "clamp_max", "where", "rsqrt", "sqrt", "exp", "log", "neg",
               "abs", "erf", "leaky_relu", "elu", "mish", "maximum", "minimum", "reciprocal", "square", "sin", "cos",
               "masked_fill", "relu6", "_native_batch_norm_legit_no_training", "batch_norm"}
IGNORED = {"aten._assert_tensor_metadata.default", "aten.sym_size.int", "aten._assert_scalar.default",
           "aten.sym_constrain_range_for_size.default"}




def load_torch(spec: str, batch: int = 1, seq: int | None = None, elem_bytes: int = 2) -> Imported:
    """A model of the zoo (``zoo:resnet50``) or torchvision (``torchvision:resnet50``) as a :class:`Graph`."""
    from loopwise.memory.zoo import build

    module, args, kwargs = build(spec, batch, seq)
    name = spec.partition(":")[2] + f"-b{batch}" + (f"-s{_length(args)}" if _length(args) else "")
    return import_module(module, args, kwargs, name=name, elem_bytes=elem_bytes)


def import_module(module, args: tuple, kwargs: dict | None = None, name: str = "model", elem_bytes: int = 2) -> Imported:
    """Exports ``module`` (meta-device parameters and example inputs) and builds its graph."""
    import torch

    try:
        ep = torch.export.export(module, args, kwargs=kwargs or {}, strict=False)
    except Exception as exc:  # noqa: BLE001 - a user's model: one line on why it does not export
        raise UserError(f"{name}: torch.export failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    return _Builder(ep, name, elem_bytes).build()


def _length(args) -> int | None:
    """The sequence length of a text model's inputs: token ids ``[b, s]``, hidden states
    ``[b, s, d]``, or a key cache ``[b, h, s, d]`` beside one token."""
    if len(args) > 1 and args[1].dim() == 4:
        return int(args[1].shape[2])
    return int(args[0].shape[1]) if args[0].dim() in (2, 3) else None




class _Builder(CopyOperators, ComputeOperators):
    def __init__(self, ep, name: str, elem_bytes: int) -> None:
        self.ep, self.name, self.elem = ep, name, elem_bytes
        self.env: dict[str, object] = {}
        self.ops: list[Operator] = []
        self.weights: set[str] = set()
        self.folded: list[str] = []
        self.unsupported: dict[str, int] = {}
        self.generated: list[str] = []
        self.users: dict[str, int] = {}
        self.bn_folds: dict[str, str] = {}  # a batch norm's output -> the convolution output it aliases

    # -- values -----------------------------------------------------------------------------
    def _elem(self, val) -> int:
        return self.elem if val.dtype.is_floating_point else val.element_size()

    def _real(self, name: str, val) -> Ref:
        shape = tuple(int(d) for d in val.shape)
        return Ref(shape, name, shape, lambda ix: ix, self._elem(val))

    def ref(self, arg) -> Ref | None:
        """The Ref of a node argument (None for a scalar or None)."""
        from torch.fx import Node

        if isinstance(arg, Node):
            value = self.env.get(arg.name)
            return value if isinstance(value, Ref) else None
        return None

    # -- building -----------------------------------------------------------------------------
    def build(self) -> Imported:
        from torch.export.graph_signature import InputKind

        graph = self.ep.graph
        for node in graph.nodes:
            for user in node.users:
                self.users[node.name] = self.users.get(node.name, 0) + 1
        kinds = {spec.arg.name: spec.kind for spec in self.ep.graph_signature.input_specs if hasattr(spec.arg, "name")}
        outputs: list[str] = []
        for node in graph.nodes:
            if node.op == "placeholder":
                val = node.meta.get("val")
                if val is None or not hasattr(val, "shape"):
                    continue
                self.env[node.name] = self._real(node.name, val)
                if kinds.get(node.name) in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                    self.weights.add(node.name)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                outputs += [self._output(arg) for arg in flat_values(node.args) if self._stored(arg)]
        used = {t.name for op in self.ops for t in op.tensors}
        g = Graph(self.name, tuple(self.ops), frozenset(w for w in self.weights if w in used),
                  declared_outputs=frozenset(o for o in outputs if o in used))
        return Imported(g, {}, self.folded, self.unsupported, generated=self.generated)

    def _stored(self, arg) -> bool:
        r = self.ref(arg)
        return r is not None and (r.base is not None or bool(r.parts))

    def _output(self, arg) -> str:
        """The tensor a returned value is stored as: the operator output it views, or, for a
        concatenation, a padded tensor or a view of a model input (no operator writes it whole), a
        copy written by one more operator, so that every returned element goes to DRAM."""
        r = self.ref(arg)
        written = {a.tensor for op in self.ops for a in op.writes}
        if not r.parts and r.base in written:
            return r.base
        name = f"{arg.name}_out" if arg.name == r.base else arg.name  # a model input returned as it is
        if name not in written:  # the same value returned twice is copied once
            dims = [f"d{j}" for j in range(len(r.shape))]
            out = Ref(r.shape, name, r.shape, lambda ix: ix, r.elem)
            self._emit(f"copy:{name}", dict(zip(dims, r.shape)), [r.pairs(tuple(dims))], [out.pairs(tuple(dims))])
        return name

    def _call(self, node) -> None:
        target = str(node.target)
        val = node.meta.get("val")
        if target in IGNORED:
            return
        if target == "<built-in function getitem>" or target.endswith("getitem"):
            seq = self.env.get(node.args[0].name)
            if isinstance(seq, list):
                self.env[node.name] = seq[node.args[1]]
            return
        tensor_args = [a for a in flat_values((node.args, node.kwargs)) if self.ref(a) is not None]
        if tensor_args and all(self.ref(a).base is None for a in tensor_args) or (not tensor_args and hasattr(val, "shape")):
            self._generate(node, val)  # computed from nothing in memory: recomputed where it is read
            return
        short = target.split(".")[1] if target.startswith("aten.") else target
        if short.endswith("_") and not short.endswith("__"):
            short = short[:-1]  # an in-place variant (relu_) moves what the functional one does
        handler = getattr(self, f"_op_{short}", None)
        try:
            if target in IDENTITY:
                self.env[node.name] = self.ref(node.args[0])
                self.folded.append(short)
            elif target in VIEWS:
                self.env[node.name] = self.ref(node.args[0]).reshaped(val.shape)
                self.folded.append(short)
            elif handler is not None:
                handler(node, val)
            elif short in ELEMENTWISE:
                self._elementwise(node, val)
            else:
                self._unsupported(node, val, short)
        except (KeyError, ValueError, IndexError, AttributeError, TypeError) as exc:
            raise UserError(f"{self.name}: {target} node {node.name!r}: {exc}") from None

    def _generate(self, node, val) -> None:
        if isinstance(val, (list, tuple)):
            self.env[node.name] = [Ref(tuple(v.shape), None, (), lambda ix: ix) for v in val if hasattr(v, "shape")]
        elif hasattr(val, "shape"):
            self.env[node.name] = Ref(tuple(int(d) for d in val.shape), None, (), lambda ix: ix)
        self.generated.append(str(node.target).split(".")[1] if str(node.target).startswith("aten.") else str(node.target))

    def _unsupported(self, node, val, short: str) -> None:
        self.unsupported[short] = self.unsupported.get(short, 0) + 1
        outs = val if isinstance(val, (list, tuple)) else [val]
        outs = [v for v in outs if hasattr(v, "shape")]
        if not outs:
            return
        inputs = [r for r in (self.ref(a) for a in flat_values((node.args, node.kwargs))) if r is not None and r.base is not None]
        names = [f"{node.name}_{i}" if len(outs) > 1 else node.name for i in range(len(outs))]
        values = [self._real(nm, v) for nm, v in zip(names, outs)]
        dims = opaque_dims([r.shape for r in (*inputs, *values)])
        reads = [r.pairs(linear_walk(r.shape, dims)) for r in inputs]
        writes = [out.pairs(linear_walk(out.shape, dims)) for out in values]
        self.env[node.name] = values if isinstance(val, (list, tuple)) else values[0]
        self._emit(f"{short}:{node.name}", dims, reads, writes)

    # -- helpers ------------------------------------------------------------------------------
    def _out(self, node, val) -> Ref:
        out = self._real(node.name, val)
        self.env[node.name] = out
        return out

    def _emit(self, name, dims, reads, writes, macs=0, coupled=()) -> None:
        reads, writes = flatten_pairs(reads), flatten_pairs(writes)
        tensors: dict[str, Tensor] = {}
        for t, _ in (*reads, *writes):
            tensors.setdefault(t.name, t)
        dims = {k: int(v) for k, v in dims.items()}
        self.ops.append(Operator(name, dims, tuple(tensors.values()), reads=tuple(a for _, a in reads),
                                 writes=tuple(a for _, a in writes), macs=int(macs), coupled=frozenset(coupled)))

    def _broadcast_read(self, ref: Ref, out_shape, dims: list[str]):
        lead = len(out_shape) - len(ref.shape)
        if lead < 0:
            raise ValueError(f"an input of shape {ref.shape} does not broadcast to {tuple(out_shape)}")
        index = tuple("0" if s == 1 and out_shape[lead + j] != 1 else dims[lead + j] for j, s in enumerate(ref.shape))
        return ref.pairs(index)
