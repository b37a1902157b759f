"""ONNX models into the memory IR (``onnx`` with shape inference; weights are not needed, so the
weight-stripped workloads ZigZag ships load as they are).

Operators become loop nests (:mod:`loopwise.memory.ir`): Conv (groups, strides, pads, dilations,
bias), Gemm / MatMul, MaxPool / AveragePool, GlobalAveragePool, and elementwise operators (Relu,
Clip, Add, Mul, Sigmoid, ...). Copy operators that only reinterpret a tensor (Flatten, Reshape,
Squeeze, Unsqueeze) are folded into their consumers' access maps (an index of the reshaped tensor
becomes floor/mod expressions on the original), so they move no bytes. Constant produces no tensor
traffic. Any other operator is reported by name and counted at its compulsory traffic (an
elementwise-like pass over its inputs and outputs), never dropped silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from loopwise.errors import UserError
from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor

ELEMENTWISE = {"Relu", "Clip", "Add", "Mul", "Sub", "Div", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Erf",
               "Sqrt", "Pow", "Exp", "LeakyRelu", "Identity", "BatchNormalization", "Softplus", "Gelu"}
FOLDED = {"Flatten", "Reshape", "Squeeze", "Unsqueeze"}


@dataclass
class Imported:
    graph: Graph
    names: dict[str, str] = field(default_factory=dict)  # the graph's tensor names -> the model's own
    folded: list[str] = field(default_factory=list)  # copy operators folded away, by op type
    unsupported: dict[str, int] = field(default_factory=dict)  # op type -> count (kept at compulsory traffic)
    generated: list[str] = field(default_factory=list)  # operators computed from no stored tensor (recomputed)


def load_onnx(path: str | Path, elem_bytes: int = 2) -> Imported:
    """The model at ``path`` as a :class:`Graph` (elements of ``elem_bytes``, bf16 by default)."""
    import onnx
    from onnx import shape_inference

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        model = shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False))
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
        self.alias: dict[str, tuple[str, tuple[int, ...]]] = {}  # reshaped name -> (original name, its shape)
        self.names: dict[str, str] = {}
        self.folded: list[str] = []
        self.unsupported: dict[str, int] = {}

    def build(self) -> Imported:
        ops: list[Operator] = []
        for i, node in enumerate(self.model.graph.node):
            kind = node.op_type
            if kind == "Constant":
                self.constants.update(node.output)
                continue
            if kind in FOLDED:
                self._fold(node)
                continue
            name = f"{kind}:{node.name or i}"
            try:
                if kind == "Conv":
                    ops.append(self._conv(name, node))
                elif kind in ("Gemm", "MatMul"):
                    ops.append(self._gemm(name, node))
                elif kind in ("MaxPool", "AveragePool"):
                    ops.append(self._pool(name, node))
                elif kind in ("GlobalAveragePool", "GlobalMaxPool"):
                    ops.append(self._global_pool(name, node))
                elif kind in ELEMENTWISE:
                    ops.append(self._pass(name, node))
                else:
                    self.unsupported[kind] = self.unsupported.get(kind, 0) + 1
                    ops.append(self._pass(name, node))
            except (KeyError, ValueError) as exc:
                raise UserError(f"{self.where}: {kind} node {node.name!r}: {exc}") from None
        used = {t.name for op in ops for t in op.tensors}
        weights = frozenset(_safe(w) for w in self.weights if _safe(w) in used)
        return Imported(Graph(self.where, tuple(ops), weights), self.names, self.folded, self.unsupported)

    # -- helpers ----------------------------------------------------------------------------
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

    def _read(self, name: str, index: tuple[str, ...]) -> tuple[Tensor, Access]:
        """A read of ``name`` at ``index``; a folded reshape reads the original tensor through the
        same element order (row-major), as floor / mod expressions of the linear index."""
        if name in self.alias:
            original, shape = self.alias[name]
            view = self.shapes[name]
            strides = [math.prod(view[j + 1:]) for j in range(len(view))]
            linear = " + ".join(f"{s}*({e})" for s, e in zip(strides, index)) or "0"
            dims = [math.prod(shape[j + 1:]) for j in range(len(shape))]
            index = tuple(f"floor(({linear})/{d}) mod {n}" for d, n in zip(dims, shape))
            return Tensor(self._name(original), shape, self.elem), Access(self._name(original), index)
        return Tensor(self._name(name), self._shape(name), self.elem), Access(self._name(name), index)

    def _write(self, name: str, index: tuple[str, ...]) -> tuple[Tensor, Access]:
        return Tensor(self._name(name), self._shape(name), self.elem), Access(self._name(name), index)

    def _fold(self, node) -> None:
        source, target = node.input[0], node.output[0]
        original, shape = self.alias.get(source, (source, self._shape(source)))  # a reshape of a reshape: the first
        if math.prod(self._shape(target)) != math.prod(shape):
            raise UserError(f"{self.where}: {node.op_type} {node.name!r} changes the element count")
        self.alias[target] = (original, shape)
        self.folded.append(node.op_type)

    @staticmethod
    def _attrs(node) -> dict:
        from onnx import helper

        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def _op(self, name, dims, parts_read, parts_written, macs=0) -> Operator:
        tensors: dict[str, Tensor] = {}
        for t, _ in (*parts_read, *parts_written):
            tensors.setdefault(t.name, t)
        return Operator(name, dims, tuple(tensors.values()), reads=tuple(a for _, a in parts_read),
                        writes=tuple(a for _, a in parts_written), macs=macs)

    # -- operators --------------------------------------------------------------------------
    def _conv(self, name: str, node) -> Operator:
        a = self._attrs(node)
        x, w = node.input[0], node.input[1]
        n, c, h, wd = self._shape(x)
        k, cg, r, s = self._shape(w)
        groups = int(a.get("group", 1))
        pads = list(a.get("pads", [0, 0, 0, 0]))
        (sh, sw), (dh, dw) = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
        _, _, p, q = self._shape(node.output[0])
        kg = k // groups
        dims = {"n": n, "g": groups, "k": kg, "c": cg, "p": p, "q": q, "r": r, "s": s}
        row, col = f"{sh}*p + {dh}*r - {pads[0]}", f"{sw}*q + {dw}*s - {pads[1]}"
        reads = [self._read(x, ("n", f"{cg}*g + c", row, col)), self._read(w, (f"{kg}*g + k", "c", "r", "s"))]
        if len(node.input) > 2 and node.input[2]:
            reads.append(self._read(node.input[2], (f"{kg}*g + k",)))
        out = [self._write(node.output[0], ("n", f"{kg}*g + k", "p", "q"))]
        return self._op(name, dims, reads, out, macs=n * k * cg * p * q * r * s)

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
        """Elementwise (numpy broadcasting against the output), or an unsupported operator counted as one
        pass over its tensors."""
        out_shape = self._shape(node.output[0])
        dims = {f"d{j}": d for j, d in enumerate(out_shape)}
        reads = []
        for x in node.input:
            if not x or x in self.constants or self.shapes.get(x) == ():
                continue  # constants and scalars (a Clip's bounds) are not tensor traffic
            shape = self._shape(x)
            lead = len(out_shape) - len(shape)
            if lead >= 0 and all(s in (1, o) for s, o in zip(shape, out_shape[lead:])):
                index = tuple("0" if s == 1 and out_shape[lead + j] != 1 else f"d{lead + j}" for j, s in enumerate(shape))
            else:  # not a broadcast (an unsupported operator's odd input): one pass over it, linearly
                index = self._linear(shape, dims)
            reads.append(self._read(x, index))
        writes = [self._write(o, tuple(dims)) for o in node.output if o]
        return self._op(name, dims, reads, writes)

    @staticmethod
    def _linear(shape, dims) -> tuple[str, ...]:
        """Index into ``shape`` that walks it once in row-major order as the loop ``dims`` run (the
        tensor is read once whatever its layout: its compulsory traffic)."""
        extent = math.prod(dims.values())
        strides = [math.prod(list(dims.values())[j + 1:]) for j in range(len(dims))]
        linear = " + ".join(f"{st}*{d}" for st, d in zip(strides, dims)) or "0"
        size = math.prod(shape)
        sub = [math.prod(shape[j + 1:]) for j in range(len(shape))]
        scale = f"floor(({linear}) * {size} / {extent})" if size != extent else f"({linear})"
        return tuple(f"floor({scale}/{d}) mod {n}" for d, n in zip(sub, shape))


def _safe(name: str) -> str:
    """An ONNX tensor name (``/conv1/Conv_output_0``, ``input.1``) as an identifier ISL accepts."""
    out = "".join(ch if ch.isalnum() else "_" for ch in name)
    return out if out and not out[0].isdigit() else f"t_{out}"
