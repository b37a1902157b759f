"""ONNX models into the memory IR (``onnx`` with shape inference; weights are not needed, so the
weight-stripped workloads ZigZag ships load as they are).

Operators become loop nests (:mod:`loopwise.memory.ir`): Conv and ConvTranspose (groups, strides,
pads, dilations, bias), Gemm / MatMul (batched MatMul with broadcast batch dimensions), MaxPool /
AveragePool, GlobalAveragePool, Softmax / LogSoftmax / LayerNormalization (the row a result depends
on is a coupled dimension), and elementwise operators (Relu, Clip, Add, Mul, Sigmoid, ...). Copy
operators are folded into their consumers' access maps, so they move no bytes: Flatten, Reshape,
Squeeze, Unsqueeze (floor / mod of the linear index where a block of dimensions both splits and
merges), Transpose (a permutation), Slice and Split (offsets and steps), Pad (zeros: a read there is
no element), Concat (a read reaches each part, shifted and clipped to it), Identity, Dropout, Cast.
ReduceMean, ReduceSum, ReduceMax and the other reductions over known axes read their whole input.
Constant, Shape and the nodes computing shapes from them (a Reshape's target built by Gather and
Concat; shape inference propagates their values) produce no tensor traffic. Any other operator, or
a copy that cannot be folded, is reported by name and counted at least at all its inputs and
outputs, each whole (its loops walk the largest of them), never dropped silently.
"""

from __future__ import annotations

import math
from pathlib import Path

from loopwise.errors import UserError
from loopwise.memory.graph import Graph
from loopwise.memory.imported import Imported
from loopwise.memory.ir import (Access, Operator, Tensor, conv2d_nest, linear_walk, matmul_nest, opaque_dims,
                                reduction_nest)
from loopwise.memory.views import Ref, flatten_pairs

ELEMENTWISE = {"Relu", "Clip", "Add", "Mul", "Sub", "Div", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Erf",
               "Sqrt", "Pow", "Exp", "LeakyRelu", "BatchNormalization", "Softplus", "Gelu", "Where", "Neg",
               "Reciprocal", "Max", "Min", "Abs", "Log", "Mish", "Elu", "Selu", "PRelu"}
REDUCTIONS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}
FOLDED = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Slice", "Pad", "Split", "Identity",
          "Dropout", "Cast"}


# how the CLI and the report say an unsupported operator is counted (:meth:`_Builder._opaque`)
def load_onnx(path: str | Path, elem_bytes: int = 2) -> Imported:
    """The model at ``path`` as a :class:`Graph` (elements of ``elem_bytes``, bf16 by default)."""
    import onnx
    from onnx import shape_inference

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        # data propagation: a Reshape whose target shape is computed (Shape -> Gather -> Concat, as
        # the classic exporter writes ``x.reshape(x.shape[0], -1, 8)``) gets a static output shape
        model = shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False), data_prop=True)
    except Exception as exc:  # noqa: BLE001 - a user's file: say what is wrong in one line
        raise UserError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {str(exc)[:200]})") from None
    return _Builder(model, elem_bytes, path.name).build()


class _Builder:
    def __init__(self, model, elem_bytes: int, where: str) -> None:
        self.model, self.elem, self.where = model, elem_bytes, where
        self.shapes: dict[str, tuple[int, ...]] = {}
        for value in (*model.graph.input, *model.graph.value_info, *model.graph.output):
            dims = value.type.tensor_type.shape.dim
            self.shapes[value.name] = tuple(int(d.dim_value) for d in dims)
        self.weights = {t.name for t in model.graph.initializer}
        for t in model.graph.initializer:
            self.shapes[t.name] = tuple(int(d) for d in t.dims)
        self.constants: set[str] = set()
        self.values: dict[str, object] = {}  # constant tensors' values (Slice bounds, Pad amounts), where known
        for t in model.graph.initializer:
            if t.data_type in (6, 7) and math.prod(t.dims) <= 64:  # small int32 / int64 initializers
                from onnx import numpy_helper

                try:
                    self.values[t.name] = numpy_helper.to_array(t).tolist()
                except Exception:  # noqa: BLE001 - a stripped initializer has no data
                    pass
        self.alias: dict[str, object] = {}  # a folded copy's output -> its Ref (loopwise.memory.views)
        self.names: dict[str, str] = {}
        self.folded: list[str] = []
        self.unsupported: dict[str, int] = {}

    def build(self) -> Imported:
        ops: list[Operator] = []
        for i, node in enumerate(self.model.graph.node):
            kind = node.op_type
            if kind == "Constant":
                self.constants.update(node.output)
                self._constant_value(node)
                continue
            if self._shape_computation(node):
                self.constants.update(node.output)
                continue
            name = f"{kind}:{node.name or i}"
            if kind in FOLDED:
                try:
                    self._fold(node)
                    continue
                except (KeyError, ValueError):  # a copy this importer cannot fold: one pass over it
                    kind = f"{kind}(not folded)"
            try:
                if kind == "Conv":
                    ops.append(self._conv(name, node))
                elif kind == "ConvTranspose":
                    ops.append(self._conv(name, node, transposed=True))
                elif kind == "Gemm" or (kind == "MatMul" and len(self._shape(node.input[0])) == 2
                                        and len(self._shape(node.input[1])) == 2):
                    ops.append(self._gemm(name, node))
                elif kind == "MatMul":
                    ops.append(self._batched_matmul(name, node))
                elif kind in ("Softmax", "LogSoftmax", "LayerNormalization"):
                    ops.append(self._rowwise(name, node))
                elif kind in ("MaxPool", "AveragePool"):
                    ops.append(self._pool(name, node))
                elif kind in ("GlobalAveragePool", "GlobalMaxPool"):
                    ops.append(self._global_pool(name, node))
                elif kind in ELEMENTWISE:
                    ops.append(self._pass(name, node))
                elif kind in REDUCTIONS and self._axes(node) is not None:
                    ops.append(self._reduce(name, node))
                else:
                    self.unsupported[kind] = self.unsupported.get(kind, 0) + 1
                    ops.append(self._opaque(name, node))
            except (KeyError, ValueError) as exc:
                raise UserError(f"{self.where}: {kind} node {node.name!r}: {exc}") from None
        outputs = [self._output(o.name, ops) for o in self.model.graph.output]
        used = {t.name for op in ops for t in op.tensors}
        weights = frozenset(_safe(w) for w in self.weights if _safe(w) in used)
        return Imported(Graph(self.where, tuple(ops), weights, frozenset(o for o in outputs if o in used)),
                        self.names, self.folded, self.unsupported)

    # -- helpers ----------------------------------------------------------------------------
    def _output(self, name: str, ops: list[Operator]) -> str:
        """The tensor a graph output is stored as: itself, the operator output a folded copy views,
        or, where a folded copy made it from parts (a Concat, a Pad, a view of a graph input), a copy written by one more operator, so that every
        element of it goes to DRAM."""
        if name not in self.alias:
            return _safe(name)
        ref = self.alias[name]
        if not ref.parts and ref.base in {a.tensor for op in ops for a in op.writes}:
            return ref.base  # a view of an operator's output (a final Flatten): that output, stored
        dims = [f"d{j}" for j in range(len(ref.shape))]
        ops.append(self._op(f"copy:{name}", dict(zip(dims, ref.shape)), [ref.pairs(tuple(dims))],
                            [self._write(name, tuple(dims))]))
        return _safe(name)

    def _shape_computation(self, node) -> bool:
        """A node computing shapes, not tensor data: a Shape (it reads only the metadata), or any
        node whose inputs are all constants or such results (the Gather, Unsqueeze and Concat that
        build a Reshape's target). Its outputs are constants: no traffic, no operator."""
        if node.op_type == "Shape":
            return True
        inputs = [x for x in node.input if x]
        return bool(inputs) and all(x in self.constants or x in self.values for x in inputs)

    def _shape(self, name: str) -> tuple[int, ...]:
        """The shape ``name`` has where it is used (a folded reshape: its own, the view's)."""
        shape = self.shapes.get(name)
        if not shape or any(d < 1 for d in shape):
            raise ValueError(f"no static shape for tensor {name!r} after shape inference")
        return shape

    def _name(self, name: str) -> str:
        safe = _safe(name)
        if self.names.setdefault(safe, name) != name:
            raise ValueError(f"tensors {self.names[safe]!r} and {name!r} map to one identifier")
        return safe

    def _ref(self, name: str):
        """``name`` as a Ref: a folded copy's, or the tensor itself."""
        if name in self.alias:
            return self.alias[name]
        shape = self._shape(name)
        return Ref(shape, self._name(name), shape, lambda ix: ix, self.elem)

    def _read(self, name: str, index: tuple[str, ...]) -> list[tuple[Tensor, Access]]:
        """The reads of ``name`` at ``index``: through a folded copy (a reshape's floor / mod of the
        linear index, a transpose's permutation, a slice's offset, a concatenation's parts)."""
        return self._ref(name).pairs(index)

    def _write(self, name: str, index: tuple[str, ...]) -> tuple[Tensor, Access]:
        return Tensor(self._name(name), self._shape(name), self.elem), Access(self._name(name), index)

    def _constant_value(self, node) -> None:
        from onnx import helper, numpy_helper

        for a in node.attribute:
            if a.name == "value":
                try:
                    array = numpy_helper.to_array(helper.get_attribute_value(a))
                except Exception:  # noqa: BLE001
                    return
                if array.size <= 64:
                    self.values[node.output[0]] = array.tolist()

    def _fold(self, node) -> None:
        """A copy operator folded into its readers' access maps."""
        kind, source, target = node.op_type, node.input[0], node.output[0]
        src = self._ref(source)
        a = self._attrs(node)
        if kind in ("Flatten", "Reshape", "Squeeze", "Unsqueeze"):
            shape = self._shape(target)
            if math.prod(shape) != math.prod(src.shape):
                raise UserError(f"{self.where}: {kind} {node.name!r} changes the element count")
            self.alias[target] = src.reshaped(shape)
        elif kind in ("Identity", "Dropout", "Cast"):
            self.alias[target] = src
        elif kind == "Transpose":
            perm = list(a.get("perm", list(reversed(range(len(src.shape))))))
            inverse = [perm.index(j) for j in range(len(perm))]
            self.alias[target] = src.view(self._shape(target), lambda ix, inv=inverse: tuple(ix[i] for i in inv))
        elif kind == "Slice":
            starts = self._const(node, 1, "starts")  # the extent comes from the inferred output shape
            axes = self._const(node, 3, "axes", list(range(len(starts))))
            steps = self._const(node, 4, "steps", [1] * len(starts))
            offset, stride = [0] * len(src.shape), [1] * len(src.shape)
            for st, ax, sp in zip(starts, axes, steps):
                ax %= len(src.shape)
                n = src.shape[ax]
                offset[ax] = min(max(st + n if st < 0 else st, 0), n - (1 if sp < 0 else 0))
                stride[ax] = sp
            self.alias[target] = src.view(self._shape(target), lambda ix, o=tuple(offset), t=tuple(stride): tuple(
                (f"{oo} + {tt}*({e})" if oo else f"{tt}*({e})") if tt != 1 else (f"{oo} + {e}" if oo else e)
                for e, oo, tt in zip(ix, o, t)))
        elif kind == "Split":
            axis = int(a.get("axis", 0)) % len(src.shape)
            start = 0
            for out in node.output:
                length = self._shape(out)[axis]
                self.alias[out] = src.view(self._shape(out), lambda ix, s0=start, ax=axis: tuple(
                    f"{s0} + {e}" if j == ax and s0 else e for j, e in enumerate(ix)))
                start += length
        elif kind == "Concat":
            axis = int(a["axis"]) % len(self._shape(target))
            parts, offset = [], 0
            for name in node.input:
                r = self._ref(name)
                parts.append((r, tuple(offset if j == axis else 0 for j in range(len(r.shape)))))
                offset += r.shape[axis]
            shape = self._shape(target)
            self.alias[target] = Ref(shape, "concat", shape, lambda ix: ix, self.elem, parts=tuple(parts))
        elif kind == "Pad":
            mode = a.get("mode", b"constant")
            mode = mode.decode() if isinstance(mode, bytes) else mode
            pads = self._const(node, 1, "pads")
            if mode != "constant":
                raise ValueError(f"a {mode} pad")
            shape = self._shape(target)
            self.alias[target] = Ref(shape, "pad", shape, lambda ix: ix, self.elem, parts=((src, tuple(pads[:len(src.shape)])),))
        self.folded.append(kind)

    def _const(self, node, position: int, attribute: str, default=None) -> list[int]:
        """A Slice / Pad parameter: the attribute (old opsets) or a constant input."""
        a = self._attrs(node)
        if attribute in a:
            return [int(v) for v in a[attribute]]
        if len(node.input) > position and node.input[position]:
            value = self.values.get(node.input[position])
            if value is None:
                raise ValueError(f"its {attribute} are not constants of the model")
            return [int(v) for v in (value if isinstance(value, list) else [value])]
        if default is None:
            raise ValueError(f"no {attribute}")
        return default

    @staticmethod
    def _attrs(node) -> dict:
        from onnx import helper

        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def _op(self, name, dims, parts_read, parts_written, macs=0, coupled=()) -> Operator:
        parts_read, parts_written = flatten_pairs(parts_read), flatten_pairs(parts_written)
        tensors: dict[str, Tensor] = {}
        for t, _ in (*parts_read, *parts_written):
            tensors.setdefault(t.name, t)
        return Operator(name, dims, tuple(tensors.values()), reads=tuple(a for _, a in parts_read),
                        writes=tuple(a for _, a in parts_written), macs=macs, coupled=frozenset(coupled))

    # -- operators --------------------------------------------------------------------------
    def _conv(self, name: str, node, transposed: bool = False) -> Operator:
        """Conv, or ConvTranspose (whose write is the affine map): :func:`loopwise.memory.ir.conv2d_nest`."""
        a = self._attrs(node)
        x, w = node.input[0], node.input[1]
        n, c, h, wd = self._shape(x)
        _, k, p, q = self._shape(node.output[0])
        r, s = self._shape(w)[2:]
        pads = list(a.get("pads", [0, 0, 0, 0]))
        nest = conv2d_nest(n, c, k, r, s, int(a.get("group", 1)), (p, q), (h, wd), tuple(a.get("strides", [1, 1])),
                           (pads[0], pads[1]), tuple(a.get("dilations", [1, 1])), transposed)
        reads = [self._read(x, nest.reads[0]), self._read(w, nest.reads[1])]
        if len(node.input) > 2 and node.input[2]:
            reads.append(self._read(node.input[2], nest.bias))
        return self._op(name, nest.dims, reads, [self._write(node.output[0], nest.write)], macs=nest.macs)

    def _gemm(self, name: str, node) -> Operator:
        a = self._attrs(node)
        ta, tb = int(a.get("transA", 0)), int(a.get("transB", 0))
        sa, sb = self._shape(node.input[0]), self._shape(node.input[1])
        if len(sa) != 2 or len(sb) != 2:
            raise ValueError(f"a {node.op_type} of shapes {sa} and {sb}: 2-D operands are imported")
        m, k = (sa[1], sa[0]) if ta else sa
        n = sb[0] if tb else sb[1]
        reads = [self._read(node.input[0], ("k", "m") if ta else ("m", "k")),
                 self._read(node.input[1], ("n", "k") if tb else ("k", "n"))]
        if len(node.input) > 2 and node.input[2]:
            bias = self._shape(node.input[2])
            reads.append(self._read(node.input[2], ("n",) if len(bias) == 1 else ("m", "n")))
        return self._op(name, {"m": m, "n": n, "k": k}, reads, [self._write(node.output[0], ("m", "n"))],
                        macs=m * n * k)

    def _batched_matmul(self, name: str, node) -> Operator:
        """MatMul of N-d operands: batch dimensions broadcast, as numpy does."""
        nest = matmul_nest(self._shape(node.input[0]), self._shape(node.input[1]), self._shape(node.output[0]))
        reads = [self._read(node.input[0], nest.reads[0]), self._read(node.input[1], nest.reads[1])]
        return self._op(name, nest.dims, reads, [self._write(node.output[0], nest.write)], macs=nest.macs)

    def _rowwise(self, name: str, node) -> Operator:
        """Softmax / LogSoftmax / LayerNormalization: elementwise in its access maps, but an output
        element depends on the whole row from ``axis`` on, so those dimensions are coupled."""
        shape = self._shape(node.output[0])
        a = self._attrs(node)
        axis = int(a.get("axis", -1)) % len(shape)
        dims = [f"d{j}" for j in range(len(shape))]
        reads = [self._read(node.input[0], tuple(dims))]
        for extra in node.input[1:]:
            if extra:
                p = self._shape(extra)
                reads.append(self._read(extra, tuple(dims[len(dims) - len(p):])))
        return self._op(name, dict(zip(dims, shape)), reads, [self._write(node.output[0], tuple(dims))],
                        coupled=dims[axis:])

    def _pool(self, name: str, node) -> Operator:
        a = self._attrs(node)
        n, c, h, w = self._shape(node.input[0])
        _, _, p, q = self._shape(node.output[0])
        r, s = a["kernel_shape"]
        pads = list(a.get("pads", [0, 0, 0, 0]))
        sh, sw = a.get("strides", [1, 1])
        dh, dw = a.get("dilations", [1, 1])
        reads = [self._read(node.input[0], ("n", "c", f"{sh}*p + {dh}*r - {pads[0]}", f"{sw}*q + {dw}*s - {pads[1]}"))]
        return self._op(name, {"n": n, "c": c, "p": p, "q": q, "r": r, "s": s}, reads,
                        [self._write(node.output[0], ("n", "c", "p", "q"))])

    def _global_pool(self, name: str, node) -> Operator:
        n, c, h, w = self._shape(node.input[0])
        out_rank = len(self._shape(node.output[0]))
        return self._op(name, {"n": n, "c": c, "h": h, "w": w}, [self._read(node.input[0], ("n", "c", "h", "w"))],
                        [self._write(node.output[0], ("n", "c") + ("0",) * (out_rank - 2))])

    def _pass(self, name: str, node) -> Operator:
        """Elementwise, with numpy broadcasting against the output; an input that does not broadcast
        makes it an operator without a model (:meth:`_opaque`)."""
        out_shape = self._shape(node.output[0])
        dims = {f"d{j}": d for j, d in enumerate(out_shape)}
        reads = []
        for x in node.input:
            if not x or x in self.constants or self.shapes.get(x) == ():
                continue  # constants and scalars (a Clip's bounds) are not tensor traffic
            shape = self._shape(x)
            lead = len(out_shape) - len(shape)
            if lead < 0 or any(s not in (1, o) for s, o in zip(shape, out_shape[lead:])):
                return self._opaque(name, node)
            reads.append(self._read(x, tuple("0" if s == 1 and out_shape[lead + j] != 1 else f"d{lead + j}"
                                             for j, s in enumerate(shape))))
        writes = [self._write(o, tuple(dims)) for o in node.output if o]
        return self._op(name, dims, reads, writes)

    def _opaque(self, name: str, node) -> Operator:
        """An operator without a model: counted at least at all its inputs and outputs, each whole
        (:func:`loopwise.memory.ir.opaque_dims`: its loops walk the largest of them)."""
        inputs = [x for x in node.input if x and x not in self.constants and self.shapes.get(x) != ()]
        outputs = [o for o in node.output if o]
        dims = opaque_dims([self._ref(x).shape for x in inputs] + [self._shape(o) for o in outputs])
        reads = [self._read(x, linear_walk(self._ref(x).shape, dims)) for x in inputs]
        writes = [self._write(o, linear_walk(self._shape(o), dims)) for o in outputs]
        return self._op(name, dims, reads, writes)

    def _axes(self, node) -> list[int] | None:
        """A reduction's axes (every axis when none are given), or None where they are not known."""
        a = self._attrs(node)
        rank = len(self._shape(node.input[0]))
        if "axes" in a:
            return [int(v) for v in a["axes"]]
        if len(node.input) > 1 and node.input[1]:
            value = self.values.get(node.input[1])
            return None if value is None else [int(v) for v in (value if isinstance(value, list) else [value])]
        return None if a.get("noop_with_empty_axes", 0) else list(range(rank))

    def _reduce(self, name: str, node) -> Operator:
        """ReduceMean, ReduceSum, ReduceMax, ...: the loops span the input, read whole; the output is
        indexed by the axes kept (:func:`loopwise.memory.ir.reduction_nest`)."""
        keep = bool(self._attrs(node).get("keepdims", 1))
        dims, read, write = reduction_nest(self._shape(node.input[0]), self._axes(node), keep)
        if len(write) != len(self._shape(node.output[0])):
            raise ValueError(f"a reduction of {self._shape(node.input[0])} to {self._shape(node.output[0])}")
        return self._op(name, dims, [self._read(node.input[0], read)], [self._write(node.output[0], write)])

def _safe(name: str) -> str:
    """An ONNX tensor name (``/conv1/Conv_output_0``, ``input.1``) as an identifier ISL accepts."""
    out = "".join(ch if ch.isalnum() else "_" for ch in name)
    return out if out and not out[0].isdigit() else f"t_{out}"
