"""Operators as loop nests with affine accesses (einsum-style): what the polyhedral analysis reads.

An :class:`Operator` has named loop dimensions with extents, and accesses to tensors whose index
expressions are affine in those dimensions, written in ISL's syntax (``"2*p + r - 1"``). Strides,
dilations, padding (an index that can leave the tensor: the analysis clips it to the tensor) and
groups are all index expressions, so one representation covers convolutions, matrix products,
pooling and elementwise operators alike.
"""

from __future__ import annotations

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


def conv2d(name: str, n: int, c: int, h: int, w: int, k: int, r: int, s: int, stride: int = 1, pad: int = 0,
           dilation: int = 1, groups: int = 1, elem_bytes: int = 2,
           tensors: tuple[str, str, str] = ("X", "W", "Y")) -> Operator:
    """Y[n, g*K/G + k, p, q] += X[n, g*C/G + c, stride*p + dilation*r - pad, ...] * W[g*K/G + k, c, r, s]
    over groups g (depthwise: groups = c = k); ``c`` and ``k`` are the layer's channel counts, the
    loops run over the channels of one group. Output size as PyTorch computes it."""
    if c % groups or k % groups:
        raise ValueError(f"{name}: {c} input and {k} output channels do not split into {groups} groups")
    cg, kg = c // groups, k // groups
    p = (h + 2 * pad - dilation * (r - 1) - 1) // stride + 1
    q = (w + 2 * pad - dilation * (s - 1) - 1) // stride + 1
    row, col = f"{stride}*p + {dilation}*r - {pad}", f"{stride}*q + {dilation}*s - {pad}"
    x, wt, y = tensors
    return Operator(name, {"n": n, "g": groups, "k": kg, "c": cg, "p": p, "q": q, "r": r, "s": s},
                    (Tensor(x, (n, c, h, w), elem_bytes), Tensor(wt, (k, cg, r, s), elem_bytes),
                     Tensor(y, (n, k, p, q), elem_bytes)),
                    reads=(Access(x, ("n", f"{cg}*g + c", row, col)), Access(wt, (f"{kg}*g + k", "c", "r", "s"))),
                    writes=(Access(y, ("n", f"{kg}*g + k", "p", "q")),), macs=n * kg * cg * groups * p * q * r * s)


def elementwise(name: str, shape: tuple[int, ...], inputs: tuple[str, ...], output: str,
                elem_bytes: int = 2) -> Operator:
    """out[i...] = f(in_1[i...], ...): every tensor of ``shape``, each element read and written once."""
    dims = {f"d{j}": extent for j, extent in enumerate(shape)}
    index = tuple(dims)
    return Operator(name, dims, tuple(Tensor(t, tuple(shape), elem_bytes) for t in (*inputs, output)),
                    reads=tuple(Access(t, index) for t in inputs), writes=(Access(output, index),))
