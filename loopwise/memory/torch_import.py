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

import math
from dataclasses import dataclass
from typing import Callable

from loopwise.errors import UserError
from loopwise.memory.graph import Graph
from loopwise.memory.ir import (Access, Operator, Tensor, conv2d_nest, linear_walk, matmul_nest, opaque_dims,
                                reduction_nest)
from loopwise.memory.onnx_import import Imported

Index = tuple[str, ...]
IDENTITY = {"aten.contiguous.default", "aten.clone.default", "aten.dropout.default", "aten.alias.default",
            "aten.detach.default", "aten.to.dtype", "aten.to.dtype_layout", "aten._to_copy.default",
            "aten.lift_fresh_copy.default", "aten.feature_dropout.default", "aten.type_as.default",
            # eval-mode dropout, also in place (torchvision's EfficientNet: nn.Dropout(inplace=True))
            "aten.dropout_.default", "aten.feature_dropout_.default", "aten.alpha_dropout.default",
            "aten.alpha_dropout_.default", "aten.feature_alpha_dropout.default",
            "aten.feature_alpha_dropout_.default"}
VIEWS = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.flatten.using_ints"}
ELEMENTWISE = {"add", "sub", "rsub", "mul", "div", "relu", "gelu", "tanh", "sigmoid", "silu", "hardtanh", "hardswish",
               "hardsigmoid", "pow", "clamp", "clamp_min", "clamp_max", "where", "rsqrt", "sqrt", "exp", "log", "neg",
               "abs", "erf", "leaky_relu", "elu", "mish", "maximum", "minimum", "reciprocal", "square", "sin", "cos",
               "masked_fill", "relu6", "_native_batch_norm_legit_no_training", "batch_norm"}
IGNORED = {"aten._assert_tensor_metadata.default", "aten.sym_size.int", "aten._assert_scalar.default",
           "aten.sym_constrain_range_for_size.default"}


@dataclass
class Ref:
    """A tensor as an operator sees it: ``shape`` in its own coordinates, ``base`` the tensor in
    memory, and ``to_base`` the index map from the former to the latter (folded copies)."""

    shape: tuple[int, ...]
    base: str | None  # None: generated (no DRAM traffic)
    base_shape: tuple[int, ...]
    to_base: Callable[[Index], Index]
    elem: int = 2
    pure: bool = True  # only reshapes away from its base (a further reshape maps to the base directly)
    # a concatenation or a padded tensor: its base is no tensor; an index of it reads each part
    # (Ref, offset per dimension), shifted by the offsets and guarded to the part's extent
    parts: tuple = ()

    def read(self, index: Index) -> Index:
        return tuple(_tidy(e) for e in self.to_base(tuple(index)))

    def view(self, shape, fn: Callable[[Index], Index]) -> "Ref":
        """This tensor seen as ``shape`` through the index map ``fn`` (a copy of it, folded)."""
        return Ref(tuple(int(d) for d in shape), self.base, self.base_shape,
                   lambda ix, f=fn, g=self.to_base: g(f(ix)), self.elem, pure=False, parts=self.parts)

    def reshaped(self, shape) -> "Ref":
        """This tensor viewed as ``shape``: straight from the base when it is itself only reshapes of
        it (a flatten and the view that undoes it give back the plain index)."""
        shape = tuple(int(d) for d in shape)
        if self.pure and self.base is not None:
            return Ref(shape, self.base, self.base_shape, reshape_map(self.base_shape, shape), self.elem, parts=self.parts)
        return self.view(shape, reshape_map(self.shape, shape))

    def pairs(self, index: Index, guard: str = "") -> list[tuple[Tensor, Access]]:
        """The reads (or the write) of this tensor at ``index``: none when generated, one per part of
        a concatenation or a padded tensor (each where the index falls in it)."""
        if self.base is None:
            return []
        if self.parts:
            return [pair for part, at, g in split_parts(self, index, guard) for pair in part.pairs(at, g)]
        return [(Tensor(self.base, self.base_shape, self.elem), Access(self.base, self.read(index), guard))]


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


def _tidy(expr: str) -> str:
    expr = expr.strip()
    while expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]):
        expr = expr[1:-1].strip()
    return expr


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def _strides(shape) -> list[int]:
    return [math.prod(shape[j + 1:]) for j in range(len(shape))]


def reshape_map(src: tuple[int, ...], view: tuple[int, ...]) -> Callable[[Index], Index]:
    """Index map from a row-major ``view`` of a tensor to the tensor of shape ``src``. Dimensions are
    matched in blocks of equal products, so a split or merge gives plain affine expressions (a
    ``[b, s, 768]`` read as ``[b, s, 12, 64]`` is ``64*h + d`` in its last dimension) and only a
    block that does both needs floor / mod."""
    blocks, i, j = [], 0, 0
    while i < len(src) or j < len(view):
        si, vj = [i], [j]
        ps = src[i] if i < len(src) else 1
        pv = view[j] if j < len(view) else 1
        i, j = i + 1, j + 1
        while ps != pv:
            if ps < pv:
                ps *= src[i]
                si.append(i)
                i += 1
            else:
                pv *= view[j]
                vj.append(j)
                j += 1
        blocks.append(([a for a in si if a < len(src)], [b for b in vj if b < len(view)]))

    def to_src(index: Index) -> Index:
        out = ["0"] * len(src)
        for s_dims, v_dims in blocks:
            v_dims = [b for b in v_dims if view[b] != 1]
            s_dims_real = [a for a in s_dims if src[a] != 1]
            if not s_dims_real:
                continue
            v_str = _strides([view[b] for b in v_dims])
            linear = " + ".join(f"{st}*({index[b]})" if st != 1 else f"({index[b]})" for st, b in zip(v_str, v_dims)) or "0"
            s_str = _strides([src[a] for a in s_dims_real])
            for k, (a, st) in enumerate(zip(s_dims_real, s_str)):
                if len(s_dims_real) == 1:
                    out[a] = linear
                elif len(v_dims) == 1 and k == 0:
                    out[a] = f"floor(({linear})/{st})"
                elif st == 1:
                    out[a] = f"({linear}) mod {src[a]}"
                else:
                    out[a] = f"floor(({linear})/{st}) mod {src[a]}"
        return tuple(out)

    return to_src


class _Builder:
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
                outputs += [self._output(arg) for arg in _flat(node.args) if self._stored(arg)]
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
        tensor_args = [a for a in _flat((node.args, node.kwargs)) if self.ref(a) is not None]
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
        inputs = [r for r in (self.ref(a) for a in _flat((node.args, node.kwargs))) if r is not None and r.base is not None]
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
        reads, writes = _pairs(reads), _pairs(writes)
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

    # -- copy operators -----------------------------------------------------------------------
    def _op_transpose(self, node, val) -> None:
        src = self.ref(node.args[0])
        n = len(src.shape)
        a, b = node.args[1] % n, node.args[2] % n
        perm = list(range(n))
        perm[a], perm[b] = perm[b], perm[a]
        self._permuted(node, val, src, perm, "transpose")

    def _op_t(self, node, val) -> None:
        src = self.ref(node.args[0])
        self._permuted(node, val, src, list(reversed(range(len(src.shape)))), "t")

    def _op_permute(self, node, val) -> None:
        src = self.ref(node.args[0])
        self._permuted(node, val, src, [d % len(src.shape) for d in node.args[1]], "permute")

    def _permuted(self, node, val, src, perm, kind) -> None:
        inverse = [perm.index(j) for j in range(len(perm))]  # source dim j is view dim inverse[j]
        self.env[node.name] = src.view(val.shape, lambda ix, inv=inverse: tuple(ix[inv[j]] for j in range(len(inv))))
        self.folded.append(kind)

    def _op_unsqueeze(self, node, val) -> None:
        src = self.ref(node.args[0])
        d = node.args[1] % (len(src.shape) + 1)
        self.env[node.name] = src.view(val.shape, lambda ix, d=d: ix[:d] + ix[d + 1:])
        self.folded.append("unsqueeze")

    def _op_squeeze(self, node, val) -> None:
        src = self.ref(node.args[0])
        self.env[node.name] = src.reshaped(val.shape)
        self.folded.append("squeeze")

    def _op_expand(self, node, val) -> None:
        src = self.ref(node.args[0])
        lead = len(val.shape) - len(src.shape)
        self.env[node.name] = src.view(
            val.shape, lambda ix, lead=lead, s=src.shape: tuple("0" if s[j] == 1 else ix[lead + j] for j in range(len(s))))
        self.folded.append("expand")

    def _op_slice(self, node, val) -> None:
        src = self.ref(node.args[0])
        n = len(src.shape)
        dim = (node.args[1] if len(node.args) > 1 else 0) % n
        start = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0
        start = max(0, start + src.shape[dim]) if start < 0 else min(start, src.shape[dim])
        step = node.args[4] if len(node.args) > 4 else 1
        def shift(ix, d=dim, a=start, s=step):
            e = ix[d] if s == 1 else f"{s}*({ix[d]})"
            return ix[:d] + (f"{a} + {e}" if a else e,) + ix[d + 1:]

        self.env[node.name] = src.view(val.shape, shift)
        self.folded.append("slice")

    def _op_select(self, node, val) -> None:
        src = self.ref(node.args[0])
        dim = node.args[1] % len(src.shape)
        i = node.args[2] % src.shape[dim]
        self.env[node.name] = src.view(val.shape, lambda ix, d=dim, i=i: ix[:d] + (str(i),) + ix[d:])
        self.folded.append("select")

    def _op_split(self, node, val) -> None:
        src = self.ref(node.args[0])
        dim = (node.args[2] if len(node.args) > 2 else 0) % len(src.shape)
        parts, start = [], 0
        for v in val:
            parts.append(src.view(v.shape, lambda ix, d=dim, a=start: ix[:d] + (f"{a} + {ix[d]}" if a else ix[d],)
                                      + ix[d + 1:]))
            start += int(v.shape[dim])
        self.env[node.name] = parts
        self.folded.append("split")

    _op_split_with_sizes = _op_split

    def _op_chunk(self, node, val) -> None:
        self._op_split(node, val)

    def _op_cat(self, node, val) -> None:
        """A concatenation folded into its readers: each reads the part its index falls in."""
        inputs = [self.ref(a) for a in node.args[0]]
        dim = (node.args[1] if len(node.args) > 1 else 0) % len(val.shape)
        if any(r is None for r in inputs):
            return self._unsupported(node, val, "cat")
        parts, offset = [], 0
        for r in inputs:
            if r.base is not None:
                parts.append((r, tuple(offset if j == dim else 0 for j in range(len(val.shape)))))
            offset += r.shape[dim]
        shape = tuple(int(d) for d in val.shape)
        self.env[node.name] = Ref(shape, "concat", shape, lambda ix: ix, inputs[0].elem, parts=tuple(parts))
        self.folded.append("cat")

    _op_concat = _op_concatenate = _op_cat

    def _op_constant_pad_nd(self, node, val) -> None:
        """Zero padding folded into the readers: a read in the padding touches no element."""
        src = self.ref(node.args[0])
        pads = list(node.args[1])
        value = node.args[2] if len(node.args) > 2 else 0
        if value not in (0, 0.0):
            return self._unsupported(node, val, "constant_pad_nd")
        before = [0] * len(src.shape)
        for j in range(len(pads) // 2):
            before[len(src.shape) - 1 - j] = pads[2 * j]
        shape = tuple(int(d) for d in val.shape)
        self.env[node.name] = Ref(shape, "pad", shape, lambda ix: ix, src.elem, parts=((src, tuple(before)),))
        self.folded.append("pad")

    def _op_pad(self, node, val) -> None:
        mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
        if mode != "constant":
            return self._unsupported(node, val, f"pad({mode})")
        self._op_constant_pad_nd(node, val)

    # -- compute operators --------------------------------------------------------------------
    def _elementwise(self, node, val) -> None:
        short = str(node.target).split(".")[1].rstrip("_") or "op"
        outs = val if isinstance(val, (list, tuple)) else [val]
        shape = tuple(int(d) for d in outs[0].shape)
        dims = [f"d{j}" for j in range(len(shape))]
        x = self.ref(node.args[0])
        if short in ("_native_batch_norm_legit_no_training", "batch_norm"):
            if self._fold_batch_norm(node, outs[0], x):
                return
            reads = [x.pairs(tuple(dims))]
            for arg in node.args[1:5]:
                r = self.ref(arg)
                if r is not None:
                    reads.append(r.pairs((dims[1],)))
        else:
            reads = [self._broadcast_read(r, shape, dims) for r in (self.ref(a) for a in _flat((node.args, node.kwargs)))
                     if r is not None]
        out = self._real(node.name, outs[0])
        self.env[node.name] = [out] + [None] * (len(outs) - 1) if isinstance(val, (list, tuple)) else out
        self._emit(f"{short}:{node.name}", dict(zip(dims, shape)), reads, [out.pairs(tuple(dims))])

    def _fold_batch_norm(self, node, val, x: Ref) -> bool:
        """A batch norm whose input is a convolution's output read by nothing else: folded into that
        convolution (scale into the weights, shift into a per-channel bias)."""
        producer = node.args[0]
        if x.base is None or x.base != producer.name or self.users.get(producer.name, 0) != 1 or not self.ops:
            return False
        conv = self.ops[-1]
        if not conv.name.startswith("convolution:") or conv.writes[0].tensor != x.base:
            return False
        k_index = conv.writes[0].index[1]
        bias = f"{conv.name.split(':', 1)[1]}_folded_bias"
        has_bias = any(len(t.shape) == 1 for t in conv.tensors)  # the shift joins the bias it has
        if not has_bias:
            t = Tensor(bias, (x.shape[1],), self.elem)
            self.weights.add(bias)
            self.ops[-1] = Operator(conv.name, conv.dims, conv.tensors + (t,), reads=conv.reads + (Access(bias, (k_index,)),),
                                    writes=conv.writes, macs=conv.macs, coupled=conv.coupled)
        out = Ref(x.shape, x.base, x.base_shape, x.to_base, x.elem)
        self.env[node.name] = [out, None, None] if isinstance(node.meta.get("val"), (list, tuple)) else out
        self.folded.append("batch_norm")
        return True

    def _op_convolution(self, node, val) -> None:
        x, w = self.ref(node.args[0]), self.ref(node.args[1])
        b = self.ref(node.args[2]) if len(node.args) > 2 else None
        stride, padding, dilation = node.args[3], node.args[4], node.args[5]
        transposed, groups = bool(node.args[6]), int(node.args[8])
        self._conv(node, val, x, w, b, stride, padding, dilation, groups, transposed)

    def _op_conv2d(self, node, val) -> None:
        a = list(node.args) + [None, [1, 1], [0, 0], [1, 1], 1][len(node.args) - 2:]
        self._conv(node, val, self.ref(a[0]), self.ref(a[1]), self.ref(a[2]), a[3], a[4], a[5], int(a[6]), False)

    def _op_conv_transpose2d(self, node, val) -> None:
        a = list(node.args) + [None, [1, 1], [0, 0], [0, 0], 1, [1, 1]][len(node.args) - 2:]
        self._conv(node, val, self.ref(a[0]), self.ref(a[1]), self.ref(a[2]), a[3], a[4], a[7], int(a[6]), True)

    def _conv(self, node, val, x, w, b, stride, padding, dilation, groups, transposed) -> None:
        if len(x.shape) != 4:
            raise ValueError(f"a {len(x.shape) - 2}-d convolution: 2-d ones are imported")
        if isinstance(padding, str):
            raise ValueError(f"padding={padding!r}: give explicit padding")
        out = self._real(node.name, val)
        k = out.shape[1]
        r, s = w.shape[2:]
        nest = conv2d_nest(x.shape[0], x.shape[1], k, r, s, groups, out.shape[2:], x.shape[2:], _pair(stride),
                           _pair(padding), _pair(dilation), transposed)
        reads = [x.pairs(nest.reads[0]), w.pairs(nest.reads[1])] + ([b.pairs(nest.bias)] if b is not None else [])
        self.env[node.name] = out
        self._emit(f"convolution:{node.name}", nest.dims, reads, [out.pairs(nest.write)], nest.macs)

    def _op_linear(self, node, val) -> None:
        x, w = self.ref(node.args[0]), self.ref(node.args[1])
        b = self.ref(node.args[2]) if len(node.args) > 2 else None
        lead = [f"l{j}" for j in range(len(x.shape) - 1)]
        n, k = w.shape
        out = self._out(node, val)
        dims = dict(zip(lead, x.shape[:-1])) | {"n": n, "k": k}
        reads = [x.pairs((*lead, "k")), w.pairs(("n", "k"))]
        if b is not None:
            reads.append(b.pairs(("n",)))
        self._emit(f"linear:{node.name}", dims, reads, [out.pairs((*lead, "n"))], math.prod(x.shape[:-1]) * n * k)

    def _op_addmm(self, node, val) -> None:
        bias, x, w = (self.ref(a) for a in node.args[:3])
        m, k = x.shape
        n = w.shape[1]
        # a product of a flattened tensor ([b*s, k], as GPT-2's Conv1D and most 2-D matmuls see their
        # input) is the same product over the unflattened rows: its loops keep the batch and token
        # dimensions, so a slab over the batch reaches it, and its output is stored unflattened
        lead_dims, x_ref = ("m",), x
        source = node.args[1]
        if str(getattr(source, "target", "")) in VIEWS:
            unflat = self.ref(source.args[0])
            if unflat is not None and len(unflat.shape) > 2 and unflat.shape[-1] == k and math.prod(unflat.shape[:-1]) == m:
                lead_dims, x_ref = tuple(f"l{j}" for j in range(len(unflat.shape) - 1)), unflat
        lead_shape = x_ref.shape[:-1] if x_ref is not x else (m,)
        out_shape = (*lead_shape, n)
        out = Ref(out_shape, node.name, out_shape, lambda ix: ix, self._elem(val))
        self.env[node.name] = out.reshaped((m, n)) if x_ref is not x else out
        rows = [f"{st}*{d}" for st, d in zip(_strides(lead_shape), lead_dims)]
        row = " + ".join(rows) if len(rows) > 1 else lead_dims[0]
        reads = [x_ref.pairs((*lead_dims, "k")), w.pairs(("k", "n"))]
        if bias is not None:
            reads.append(bias.pairs(("n",)) if bias.shape in ((n,), (1, n)) and len(bias.shape) == 1 else
                         self._broadcast_read(bias, (m, n), [row, "n"]))
        self._emit(f"addmm:{node.name}", dict(zip(lead_dims, lead_shape)) | {"n": n, "k": k}, reads,
                   [out.pairs((*lead_dims, "n"))], m * n * k)

    def _matmul(self, node, val, a: Ref, b: Ref) -> None:
        out = self._out(node, val)
        nest = matmul_nest(a.shape, b.shape, out.shape)
        self._emit(f"matmul:{node.name}", nest.dims, [a.pairs(nest.reads[0]), b.pairs(nest.reads[1])],
                   [out.pairs(nest.write)], nest.macs)

    def _op_matmul(self, node, val) -> None:
        self._matmul(node, val, self.ref(node.args[0]), self.ref(node.args[1]))

    _op_mm = _op_bmm = _op_matmul

    def _rowwise(self, node, val, dims_whole: int, params=()) -> None:
        x = self.ref(node.args[0])
        shape = tuple(int(d) for d in (val[0] if isinstance(val, (list, tuple)) else val).shape)
        dims = [f"d{j}" for j in range(len(shape))]
        reads = [x.pairs(tuple(dims))]
        for p in params:
            r = self.ref(p)
            if r is not None:
                reads.append(r.pairs(tuple(dims[len(dims) - len(r.shape):])))
        out = self._real(node.name, val[0] if isinstance(val, (list, tuple)) else val)
        self.env[node.name] = [out, None, None] if isinstance(val, (list, tuple)) else out
        short = str(node.target).split(".")[1]
        self._emit(f"{short}:{node.name}", dict(zip(dims, shape)), reads, [out.pairs(tuple(dims))],
                   coupled=dims[len(dims) - dims_whole:])

    def _op_softmax(self, node, val) -> None:
        x = self.ref(node.args[0])
        dim = node.args[1] % len(x.shape)
        if dim != len(x.shape) - 1:
            raise ValueError(f"softmax over dimension {dim} of {len(x.shape)}: the last dimension is imported")
        self._rowwise(node, val, 1)

    _op__softmax = _op_log_softmax = _op__log_softmax = _op_softmax

    def _op_layer_norm(self, node, val) -> None:
        self._rowwise(node, val, len(node.args[1]), params=node.args[2:4])

    _op_native_layer_norm = _op_layer_norm

    def _op_embedding(self, node, val) -> None:
        weight, ids = self.ref(node.args[0]), self.ref(node.args[1])
        out = self._out(node, val)
        dims = [f"d{j}" for j in range(len(out.shape))]
        rows, width = weight.shape
        positions = math.prod(out.shape[:-1])
        # distinct rows in the order of the positions: the most rows a gather of this size can touch
        linear = " + ".join(f"{st}*{d}" for st, d in zip(_strides(out.shape[:-1]), dims[:-1])) or "0"
        row = linear if positions <= rows else f"({linear}) mod {rows}"
        reads = [weight.pairs((row, dims[-1])),
                 self._broadcast_read(ids, out.shape[:-1], dims[:-1]) if ids.base is not None else None]
        self._emit(f"embedding:{node.name}", dict(zip(dims, out.shape)), reads, [out.pairs(tuple(dims))])

    def _pool(self, node, val, kernel, stride, padding, dilation=(1, 1), kind="pool") -> None:
        x = self.ref(node.args[0])
        out_val = val[0] if isinstance(val, (list, tuple)) else val
        out = self._real(node.name, out_val)
        self.env[node.name] = [out, None] if isinstance(val, (list, tuple)) else out
        n, c, p, q = out.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _pair(kernel), _pair(stride or kernel), _pair(padding), _pair(dilation)
        dims = {"n": n, "c": c, "p": p, "q": q, "r": kh, "s": kw}
        reads = [x.pairs(("n", "c", f"{sh}*p + {dh}*r - {ph}", f"{sw}*q + {dw}*s - {pw}"))]
        self._emit(f"{kind}:{node.name}", dims, reads, [out.pairs(("n", "c", "p", "q"))])

    def _op_max_pool2d(self, node, val) -> None:
        a = list(node.args) + [None, 0, 1][len(node.args) - 2:]
        self._pool(node, val, a[1], a[2], a[3], a[4], "max_pool2d")

    _op_max_pool2d_with_indices = _op_max_pool2d

    def _op_avg_pool2d(self, node, val) -> None:
        a = list(node.args) + [None, 0][len(node.args) - 2:]
        self._pool(node, val, a[1], a[2], a[3], (1, 1), "avg_pool2d")

    def _op_adaptive_avg_pool2d(self, node, val) -> None:
        x = self.ref(node.args[0])
        h, w = x.shape[-2:]
        oh, ow = val.shape[-2:]
        if h % oh or w % ow:
            raise ValueError(f"adaptive pooling {h}x{w} -> {oh}x{ow} with uneven windows")
        self._pool(node, val, (h // oh, w // ow), (h // oh, w // ow), (0, 0), (1, 1), "adaptive_avg_pool2d")

    _op__adaptive_avg_pool2d = _op_adaptive_avg_pool2d

    def _op_mean(self, node, val) -> None:
        """A reduction over the given dimensions (all of them when none are given): the loops span
        the input, read whole; the output is indexed by the dimensions kept."""
        x = self.ref(node.args[0])
        axes = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if axes is None or isinstance(axes, bool) or axes in ([], ()):  # var(x, unbiased): every dimension
            axes = list(range(len(x.shape)))
        axes = [axes] if isinstance(axes, int) else list(axes)
        keep = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
        dims, read, write = reduction_nest(x.shape, axes, keep)
        out_val = val[0] if isinstance(val, (list, tuple)) else val
        if len(write) != len(out_val.shape):
            return self._unsupported(node, val, str(node.target).split(".")[1])
        out = self._real(node.name, out_val)
        self.env[node.name] = [out, None] if isinstance(val, (list, tuple)) else out
        short = str(node.target).split(".")[1]
        self._emit(f"{short}:{node.name}", dims, [x.pairs(read)], [out.pairs(write)])

    _op_sum = _op_amax = _op_amin = _op_prod = _op_var = _op_std = _op_logsumexp = _op_any = _op_all = _op_mean


def split_parts(ref: Ref, index: Index, guard: str = ""):
    """A read of ``ref`` (a concatenation, or a padded tensor) at ``index`` as reads of its parts:
    ``(part, index in the part, guard)``. Each part sits at an offset per dimension; the guard keeps
    its read to the points whose index falls inside it, so a part seen through a reshape or a slice
    cannot wrap around into elements it does not hold (and a read of the padding reads nothing)."""
    at = ref.read(index)
    out = []
    for part, offsets in ref.parts:
        shifted, conditions = [], []
        for j, (x, off) in enumerate(zip(at, offsets)):
            shifted.append(x if not off else f"{x} - {off}" if off > 0 else f"{x} + {-off}")
            if off or part.shape[j] != ref.shape[j]:
                conditions.append(f"{off} <= {x} < {off + part.shape[j]}")
        extra = " and ".join(conditions)
        out.append((part, tuple(shifted), " and ".join(c for c in (guard, extra) if c)))
    return out


def _pairs(items) -> list:
    """(Tensor, Access) pairs from a list that may hold lists of them and Nones."""
    out = []
    for item in items:
        if item is None:
            continue
        if isinstance(item, list):
            out += _pairs(item)
        else:
            out.append(item)
    return out


def _pair(v) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = list(v)
    return (int(v[0]), int(v[-1]))


def _flat(obj):
    if isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _flat(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _flat(x)
    else:
        yield obj
