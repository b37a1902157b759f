"""A tensor as an operator sees it through folded copy operators (views, transposes, slices,
concatenations, padding): the index map from the operator's coordinates to the tensor in memory.
Both importers (:mod:`loopwise.memory.torch_import`, :mod:`loopwise.memory.onnx_import`) build
their access maps from these."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from loopwise.memory.ir import Access, Tensor

Index = tuple[str, ...]


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


def strides(shape) -> list[int]:
    """Row-major strides of ``shape``, in elements."""
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
            v_str = strides([view[b] for b in v_dims])
            linear = " + ".join(f"{st}*({index[b]})" if st != 1 else f"({index[b]})" for st, b in zip(v_str, v_dims)) or "0"
            s_str = strides([src[a] for a in s_dims_real])
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


def flatten_pairs(items) -> list:
    """(Tensor, Access) pairs from a list that may hold lists of them and Nones."""
    out = []
    for item in items:
        if item is None:
            continue
        if isinstance(item, list):
            out += flatten_pairs(item)
        else:
            out.append(item)
    return out




def flat_values(obj):
    """The leaves of nested lists, tuples and dict values, in order."""
    if isinstance(obj, (list, tuple)):
        for x in obj:
            yield from flat_values(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from flat_values(x)
    else:
        yield obj
