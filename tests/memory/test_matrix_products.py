"""A model's matrix products read as batch x [m, k] x [k, n], which is how the ZigZag comparison
hands a transformer's projections and attention products to ZigZag one shape at a time."""

from __future__ import annotations

import pytest

from loopwise.errors import UserError
from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor
from loopwise.memory.zigzag_compare import matrix_products


def _op(name, dims, *accesses):
    """``accesses``: (tensor, index, shape) for the two operands and then the output."""
    tensors = tuple(Tensor(t, shape) for t, _, shape in accesses)
    a, b, o = (Access(t, index) for t, index, _ in accesses)
    return Operator(name, dims, tensors, (a, b), (o,))


def test_a_linear_layer_and_an_attention_product_split_into_batch_rows_columns_and_contraction():
    linear = _op("linear:q", {"l0": 4, "l1": 16, "n": 32, "k": 8},
                 ("x", ("l0", "l1", "k"), (4, 16, 8)), ("w", ("n", "k"), (32, 8)), ("y", ("l0", "l1", "n"), (4, 16, 32)))
    scores = _op("matmul:s", {"l0": 4, "l1": 2, "m": 16, "n": 16, "k": 4},
                 ("q", ("l0", "l1", "m", "k"), (4, 2, 16, 4)), ("kk", ("l0", "l1", "n", "k"), (4, 2, 16, 4)),
                 ("s", ("l0", "l1", "m", "n"), (4, 2, 16, 16)))
    values = _op("matmul:pv", {"l0": 4, "l1": 2, "m": 16, "n": 4, "k": 16},
                 ("p", ("l0", "l1", "m", "k"), (4, 2, 16, 16)), ("v", ("l0", "k", "4*(l1) + (n)"), (4, 16, 8)),
                 ("o", ("l0", "l1", "m", "n"), (4, 2, 16, 4)))
    got = matrix_products(Graph("g", (linear, scores, values)))
    assert [(p.name, p.batch, p.m, p.k, p.n) for p in got] == [
        ("linear:q", 1, 64, 8, 32), ("matmul:s", 8, 16, 4, 16), ("matmul:pv", 8, 16, 16, 4)]


def test_an_operator_named_a_product_that_is_not_one_is_refused_in_one_line():
    odd = _op("matmul:odd", {"i": 4, "j": 4}, ("a", ("i", "j"), (4, 4)), ("b", ("i", "j"), (4, 4)),
              ("c", ("i", "j"), (4, 4)))
    with pytest.raises(UserError, match="not a matrix product"):
        matrix_products(Graph("g", (odd,)))
