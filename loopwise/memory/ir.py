"""Operators as loop nests with affine accesses (einsum-style): what the polyhedral analysis reads.

An :class:`Operator` has named loop dimensions with extents, and accesses to tensors whose index
expressions are affine in those dimensions, written in ISL's syntax (``"2*p + r - 1"``). Strides,
dilations, padding (an index that can leave the tensor: the analysis clips it to the tensor) and
groups are all index expressions, so one representation covers convolutions, matrix products,
pooling and elementwise operators alike.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Tensor:
    """A tensor: its name, shape and element size in bytes (bf16 by default)."""

    name: str
    shape: tuple[int, ...]
    elem_bytes: int = 2

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"tensor name {self.name!r}: letters, digits and _ only")
        if any(int(d) < 1 for d in self.shape):
            raise ValueError(f"tensor {self.name} has a dimension below 1: {self.shape}")


@dataclass(frozen=True)
class Access:
    """One read or write of ``tensor`` at ``index`` (one affine expression per tensor dimension),
    at the iteration points where ``guard`` holds (an ISL constraint on the loop dimensions; empty:
    everywhere). A read of a concatenation reads each part only where the index falls in it."""

    tensor: str
    index: tuple[str, ...]
    guard: str = ""


@dataclass(frozen=True)
class Operator:
    """A loop nest: ``dims`` (name -> extent, outermost first) over which ``reads`` and ``writes``
    touch ``tensors``."""

    name: str
    dims: dict[str, int]
    tensors: tuple[Tensor, ...]
    reads: tuple[Access, ...]
    writes: tuple[Access, ...]
    macs: int = field(default=0)
    # dimensions a tile must span whole: an output element depends on the whole extent (the row of
    # a softmax or a layer norm), which the access maps alone do not say
    coupled: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        for dim, extent in self.dims.items():
            if not _NAME.match(dim) or int(extent) < 1:
                raise ValueError(f"{self.name}: loop dimension {dim!r} with extent {extent}")
        if not set(self.coupled) <= set(self.dims):
            raise ValueError(f"{self.name}: coupled dimensions {sorted(set(self.coupled) - set(self.dims))} are not loops")
        shapes = {t.name: t.shape for t in self.tensors}
        for access in self.reads + self.writes:
            if access.tensor not in shapes:
                raise ValueError(f"{self.name}: an access to {access.tensor}, which is not one of its tensors")
            if len(access.index) != len(shapes[access.tensor]):
                raise ValueError(f"{self.name}: {access.tensor} has {len(shapes[access.tensor])} dimensions, "
                                 f"the access gives {len(access.index)}")

    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise ValueError(f"{self.name}: no tensor {name!r} (it has {', '.join(t.name for t in self.tensors)})")

    def accesses(self, name: str) -> tuple[Access, ...]:
        self.tensor(name)
        return tuple(a for a in self.reads + self.writes if a.tensor == name)


def matmul(name: str, m: int, n: int, k: int, elem_bytes: int = 2) -> Operator:
    """C[m, n] += A[m, k] * B[k, n]."""
    return Operator(name, {"m": m, "n": n, "k": k},
                    (Tensor("A", (m, k), elem_bytes), Tensor("B", (k, n), elem_bytes), Tensor("C", (m, n), elem_bytes)),
                    reads=(Access("A", ("m", "k")), Access("B", ("k", "n"))), writes=(Access("C", ("m", "n")),),
                    macs=m * n * k)


@dataclass(frozen=True)
class Nest:
    """A loop nest's dimensions and index maps, before its tensors are named: what an importer
    needs to turn a convolution or a matrix product into an :class:`Operator`."""

    dims: dict[str, int]
    reads: tuple[tuple[str, ...], ...]  # per operand, in the operator's argument order
    write: tuple[str, ...]
    bias: tuple[str, ...]  # the index of a bias, where the operator has one
    macs: int


def conv2d_nest(n: int, c: int, k: int, r: int, s: int, groups: int, out_hw: tuple[int, int], in_hw: tuple[int, int],
                stride=(1, 1), pad=(0, 0), dilation=(1, 1), transposed: bool = False) -> Nest:
    """A grouped, strided, dilated, padded 2-d convolution of x [n, c, H, W] with weights w, writing
    y [n, k, P, Q]; ``c`` and ``k`` are the layer's channel counts, the loops run over one group's.
    Direct: y[n, g*K/G + k, p, q] += x[n, g*C/G + c, stride*p + dilation*r - pad, ...] * w[g*K/G + k, c, r, s].
    Transposed: the write is the affine map, y[n, g*K/G + k, stride*i + dilation*r - pad, ...] +=
    x[n, g*C/G + c, i, j] * w[g*C/G + c, k, r, s]."""
    if c % groups or k % groups:
        raise ValueError(f"{c} input and {k} output channels do not split into {groups} groups")
    cg, kg = c // groups, k // groups
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
    out_channel = f"{kg}*g + k"
    if not transposed:
        p, q = out_hw
        return Nest({"n": n, "g": groups, "k": kg, "c": cg, "p": p, "q": q, "r": r, "s": s},
                    (("n", f"{cg}*g + c", f"{sh}*p + {dh}*r - {ph}", f"{sw}*q + {dw}*s - {pw}"), (out_channel, "c", "r", "s")),
                    ("n", out_channel, "p", "q"), (out_channel,), n * k * cg * p * q * r * s)
    h, w = in_hw
    return Nest({"n": n, "g": groups, "k": kg, "c": cg, "i": h, "j": w, "r": r, "s": s},
                (("n", f"{cg}*g + c", "i", "j"), (f"{cg}*g + c", "k", "r", "s")),
                ("n", out_channel, f"{sh}*i + {dh}*r - {ph}", f"{sw}*j + {dw}*s - {pw}"), (out_channel,),
                n * c * kg * h * w * r * s)


def matmul_nest(a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> Nest:
    """out[..., m, n] += a[..., m, k] * b[..., k, n] with the batch dimensions broadcast, as numpy does
    (an operand's batch dimension of 1 against a larger one is read at 0)."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ValueError(f"a product of shapes {a_shape} and {b_shape}: matrix-vector products are not imported")
    batch = out_shape[:-2]
    lead = [f"l{j}" for j in range(len(batch))]

    def index(shape, last2):
        off = len(batch) - (len(shape) - 2)
        return tuple("0" if shape[j] == 1 and batch[off + j] != 1 else lead[off + j] for j in range(len(shape) - 2)) + last2

    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    return Nest(dict(zip(lead, batch)) | {"m": m, "n": n, "k": k}, (index(a_shape, ("m", "k")), index(b_shape, ("k", "n"))),
                (*lead, "m", "n"), (), math.prod(batch) * m * n * k)


def conv2d(name: str, n: int, c: int, h: int, w: int, k: int, r: int, s: int, stride: int = 1, pad: int = 0,
           dilation: int = 1, groups: int = 1, elem_bytes: int = 2,
           tensors: tuple[str, str, str] = ("X", "W", "Y")) -> Operator:
    """A convolution (:func:`conv2d_nest`) over tensors named ``tensors``, output size as PyTorch
    computes it."""
    if c % groups or k % groups:
        raise ValueError(f"{name}: {c} input and {k} output channels do not split into {groups} groups")
    p = (h + 2 * pad - dilation * (r - 1) - 1) // stride + 1
    q = (w + 2 * pad - dilation * (s - 1) - 1) // stride + 1
    nest = conv2d_nest(n, c, k, r, s, groups, (p, q), (h, w), (stride, stride), (pad, pad), (dilation, dilation))
    x, wt, y = tensors
    return Operator(name, nest.dims,
                    (Tensor(x, (n, c, h, w), elem_bytes), Tensor(wt, (k, c // groups, r, s), elem_bytes),
                     Tensor(y, (n, k, p, q), elem_bytes)),
                    reads=(Access(x, nest.reads[0]), Access(wt, nest.reads[1])), writes=(Access(y, nest.write),),
                    macs=nest.macs)


def elementwise(name: str, shape: tuple[int, ...], inputs: tuple[str, ...], output: str,
                elem_bytes: int = 2) -> Operator:
    """out[i...] = f(in_1[i...], ...): every tensor of ``shape``, each element read and written once."""
    dims = {f"d{j}": extent for j, extent in enumerate(shape)}
    index = tuple(dims)
    return Operator(name, dims, tuple(Tensor(t, tuple(shape), elem_bytes) for t in (*inputs, output)),
                    reads=tuple(Access(t, index) for t in inputs), writes=(Access(output, index),))


def opaque_dims(shapes: list[tuple[int, ...]]) -> dict[str, int]:
    """The loops of an operator we cannot model: the dimensions of its largest tensor, so that a
    :func:`linear_walk` over them reaches every element of every tensor it reads or writes."""
    largest = max(shapes, key=math.prod, default=())
    return {f"d{j}": int(d) for j, d in enumerate(largest)} or {"d0": 1}


def linear_walk(shape: tuple[int, ...], dims: dict[str, int]) -> tuple[str, ...]:
    """An index into ``shape`` that walks it in row-major order as the loops ``dims`` run: every
    element once when the loops have as many points as it has elements, every element (some more
    than once) when they have more. A tensor of the loops' own shape is indexed by them plainly."""
    if tuple(shape) == tuple(dims.values()):
        return tuple(dims)
    extent, size = math.prod(dims.values()), math.prod(shape)
    if size > extent:
        raise ValueError(f"a walk of {extent} points cannot reach the {size} elements of a {tuple(shape)} tensor")
    strides = [math.prod(list(dims.values())[j + 1:]) for j in range(len(dims))]
    linear = " + ".join(f"{st}*{d}" if st != 1 else d for st, d in zip(strides, dims)) or "0"
    ratio = math.gcd(size, extent)
    num, den = size // ratio, extent // ratio
    if den != 1:
        linear = f"floor(({linear})/{den})" if num == 1 else f"floor(({linear}) * {num} / {den})"
    sub = [math.prod(shape[j + 1:]) for j in range(len(shape))]
    return tuple((f"({linear}) mod {n}" if st == 1 else f"floor(({linear})/{st}) mod {n}") if j else
                 (f"{linear}" if st == 1 else f"floor(({linear})/{st})")
                 for j, (st, n) in enumerate(zip(sub, shape)))


def reduction_nest(shape: tuple[int, ...], axes: list[int], keep: bool) -> tuple[dict[str, int], tuple[str, ...], tuple[str, ...]]:
    """out = reduce(x) over ``axes`` of x [shape] (a mean, a sum, a maximum): the loops span x, read
    whole; the output is indexed by the kept dimensions (0 for a reduced one kept as size 1).
    Returns (dims, the read index, the write index)."""
    dims = {f"d{j}": int(d) for j, d in enumerate(shape)} or {"d0": 1}
    reduced = {a % len(shape) for a in axes} if shape else set()
    read = tuple(dims)[:len(shape)]
    write = tuple("0" if j in reduced else d for j, d in enumerate(read) if keep or j not in reduced)
    return dims, read, write
