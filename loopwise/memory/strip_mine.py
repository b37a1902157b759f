"""Strip-mining: a loop dimension split into blocks and the place inside a block, where a
consumer reads the tensor it writes block by block.

A projection writes ``q[t, n]`` over ``n`` < 4096; the attention after it reads ``q`` one head at a
time, ``q[t, 128*h + d]``. Slabs over the heads can run the projection and what reads it head by
head only if the projection has a loop over the heads too: ``n`` becomes ``128*n_b + n_i`` with
``n_b`` < 32 and ``n_i`` < 128. The split operator touches exactly what it did (the same points,
in another order of names), so footprints, traffic and every bound are unchanged; only the slab
dimensions it offers grow (:func:`loopwise.memory.slabs.slab_signatures`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from loopwise.memory.ir import Access, Operator
from loopwise.memory.slabs import _plain, block_of


def strip_mined(ops: tuple[Operator, ...]) -> tuple[Operator, ...]:
    """``ops`` with each dimension that writes a tensor plainly split by the stride of the blocks
    its readers read it in (:func:`split_dimension`), where every reader that reads that tensor
    dimension in blocks uses one stride."""
    strides = _reader_strides(ops)
    out = []
    for op in ops:
        for access in op.writes:
            units = {d for d, e in op.dims.items() if e == 1}
            for j, expr in enumerate(access.index):
                dim = _plain(expr, units)
                stride = strides.get((access.tensor, j))
                if dim in op.dims and stride and _splittable(op, dim, stride):
                    op = split_dimension(op, dim, stride)
        out.append(op)
    return tuple(out)


def _reader_strides(ops) -> dict[tuple[str, int], int]:
    """(tensor, dimension) -> the one stride every blocked read of it uses (0: readers disagree)."""
    strides: dict[tuple[str, int], int] = {}
    for op in ops:
        units = {d for d, e in op.dims.items() if e == 1}
        shapes = {t.name: t.shape for t in op.tensors}
        for access in op.reads:
            for j, expr in enumerate(access.index):
                for dim in op.dims:
                    if dim in units or not re.search(rf"\b{re.escape(dim)}\b", expr):
                        continue
                    stride = block_of(expr, dim, units, op.dims, shapes[access.tensor][j], access.guard)
                    if stride:
                        key = (access.tensor, j)
                        strides[key] = stride if strides.get(key, stride) == stride else 0
    return strides


def _splittable(op: Operator, dim: str, stride: int) -> bool:
    """True when every access of ``op`` that uses ``dim`` uses it plainly, it is not coupled nor in
    a guard, and ``stride`` cuts it into two or more whole blocks."""
    extent = op.dims[dim]
    if dim in op.coupled or extent % stride or extent == stride:
        return False
    units = {d for d, e in op.dims.items() if e == 1}
    word = re.compile(rf"\b{re.escape(dim)}\b")
    for access in op.reads + op.writes:
        if word.search(access.guard):
            return False
        if any(word.search(e) and _plain(e, units) != dim for e in access.index):
            return False
    return True


def split_dimension(op: Operator, dim: str, stride: int) -> Operator:
    """``op`` with loop ``dim`` replaced by ``dim_b`` (the block, ``extent / stride`` of them) and
    ``dim_i`` (the place in it, ``stride``), in that order where ``dim`` was; every index that was
    ``dim`` becomes ``stride*dim_b + dim_i``."""
    block, inner = f"{dim}_b", f"{dim}_i"
    if block in op.dims or inner in op.dims:
        return op
    dims: dict[str, int] = {}
    for d, e in op.dims.items():
        dims.update({block: e // stride, inner: stride} if d == dim else {d: e})
    units = {d for d, e in op.dims.items() if e == 1}
    split = f"{stride}*{block} + {inner}"

    def rewritten(access: Access) -> Access:
        return replace(access, index=tuple(split if _plain(e, units) == dim else e for e in access.index))

    return replace(op, dims=dims, reads=tuple(map(rewritten, op.reads)), writes=tuple(map(rewritten, op.writes)))


def split_loops(before: Operator, after: Operator) -> list[tuple[str, str]]:
    """The (block, place in the block) loop pairs :func:`split_dimension` made of ``before``'s
    loops in ``after``, in loop order."""
    added = [d for d in after.dims if d not in before.dims]
    return list(zip(added[::2], added[1::2]))
