"""Whether a part's index arithmetic needs 64-bit integers, decided from the shapes at capture time.

Triton computes with 32-bit integers unless told otherwise. An offset or any intermediate product
of an index that reaches 2**31 wraps around, and the part reads or writes the wrong element (or
out of bounds). A part whose every such value stays below :data:`LIMIT` keeps 32-bit arithmetic
(cheaper divisions); any other computes its offsets in 64 bits, and every index derived from them
follows.
"""

from __future__ import annotations

import math

LIMIT = 2**31  # the first value a signed 32-bit integer cannot hold
# room for what a program computes past the last element (its block's lanes, a window's entries)
_MARGIN = 2**16


def wide(extents) -> bool:
    """Whether any of ``extents`` (the largest values an index computation reaches) is too large
    for 32-bit arithmetic, with :data:`_MARGIN` to spare."""
    return max(extents, default=0) + _MARGIN >= LIMIT


def pass_wide(shapes) -> bool:
    """A fused pass, plain or read through slices, concatenations, gathers and permutes: its
    offsets run over its output, and each index it computes into a tensor it reads (a narrow's
    input, a cat's piece, a gather's table, a permute's input) lies below that tensor's element
    count, as does every partial sum or product of it. ``shapes``: the output's and every value's
    it reads or computes."""
    return wide(math.prod(s) for s in shapes)


def pool_wide(pool, shape, out) -> bool:
    """A pool part (:class:`~.records.PoolOp`) from ``shape`` to ``out``: its offsets run over the
    input and the output; an adaptive window of a dimension of length L pooled to O computes
    ``(o + 1) * L + O - 1``, up to ``O * (L + 1)``; a fixed one ``o * stride`` plus its dilated extent."""
    dims = len(pool.out_size or pool.kernel)
    lengths, sizes = shape[len(shape) - dims:], out[len(out) - dims:]
    extents = [math.prod(shape) + math.prod(out)]
    if pool.out_size:
        extents += [o * (n + 1) for n, o in zip(lengths, sizes)]
    else:
        extents += [o * s + k * d for o, s, k, d in zip(sizes, pool.stride, pool.kernel, pool.dilation)]
    return wide(extents)
