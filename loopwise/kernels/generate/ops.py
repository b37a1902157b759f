"""The grammar's op table: every op, by category."""

from __future__ import annotations

from functools import lru_cache

from loopwise.kernels.generate.grammar import Op
from loopwise.kernels.generate.ops_layers import layer_ops
from loopwise.kernels.generate.ops_pointwise import pointwise_ops
from loopwise.kernels.generate.ops_reduce import reduction_ops
from loopwise.kernels.generate.ops_shape import shape_ops

CATEGORIES = ("elementwise", "reduction", "scan", "norm", "matmul", "conv", "pool", "attention", "gather",
              "reshape")


@lru_cache(maxsize=1)
def all_ops() -> tuple[Op, ...]:
    """Every op of the grammar, in a fixed order (the order is part of a seed's meaning)."""
    ops = tuple(pointwise_ops() + reduction_ops() + layer_ops() + shape_ops())
    names = [op.name for op in ops]
    assert len(set(names)) == len(names), "op names are unique"
    assert {op.category for op in ops} == set(CATEGORIES), "every op has a known category"
    return ops


def by_category() -> dict[str, list[Op]]:
    """The ops of each category, in :func:`all_ops` order."""
    return {c: [op for op in all_ops() if op.category == c] for c in CATEGORIES}
