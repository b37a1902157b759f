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


def test_a_product_with_a_row_of_one_is_a_product_with_m_one():
    # ResNet-50's fc at batch 1: the importer writes the input's unit dimensions as 0, and the
    # batch dimension of extent 1 appears only in the output
    fc = _op("linear:fc", {"l0": 1, "n": 1000, "k": 2048},
             ("x", ("0", "k", "0", "0"), (1, 2048, 1, 1)), ("w", ("n", "k"), (1000, 2048)),
             ("y", ("l0", "n"), (1, 1000)))
    assert [(p.batch, p.m, p.k, p.n) for p in matrix_products(Graph("g", (fc,)))] == [(1, 1, 2048, 1000)]


def test_a_product_of_a_concatenation_reads_its_parts_as_one_operand():
    # concat([a, b], 1) @ w folded into the product: a read of each part where k falls in it
    tensors = (Tensor("a", (64, 32)), Tensor("b", (64, 32)), Tensor("w", (64, 16)), Tensor("y", (64, 16)))
    reads = (Access("a", ("m", "k"), "k <= 31"), Access("b", ("m", "k - 32"), "k >= 32"), Access("w", ("k", "n")))
    mm = Operator("MatMul:mm", {"m": 64, "n": 16, "k": 64}, tensors, reads, (Access("y", ("m", "n")),))
    assert [(p.batch, p.m, p.k, p.n) for p in matrix_products(Graph("g", (mm,)))] == [(1, 64, 64, 16)]


def _conv(name, kernel, stride, pad, side=8):
    out = (side + 2 * pad - kernel) // stride + 1
    index = lambda o, r: f"{stride}*{o} + {r} - {pad}"  # noqa: E731
    return _op(name, {"n": 2, "k": 4, "c": 3, "p": out, "q": out, "r": kernel, "s": kernel},
               ("x", ("n", "c", index("p", "r"), index("q", "s")), (2, 3, side, side)),
               ("w", ("k", "c", "r", "s"), (4, 3, kernel, kernel)), ("y", ("n", "k", "p", "q"), (2, 4, out, out)))


def test_a_convolution_is_a_product_only_where_its_windows_do_not_overlap():
    pointwise, patches = _conv("convolution:pw", 1, 2, 0), _conv("convolution:patch", 4, 4, 0)
    got = [p for op in (pointwise, patches) for p in matrix_products(Graph("g", (op,)), ("convolution",))]
    # rows: every output pixel; contraction: channels x window; each input element read once
    assert [(p.batch, p.m, p.k, p.n) for p in got] == [(1, 2 * 4 * 4, 3, 4), (1, 2 * 2 * 2, 3 * 16, 4)]
    # a 3x3 window slides one pixel: as a product its first operand would hold each pixel up to 9 times
    with pytest.raises(UserError, match="convolution:w3: reads or writes elements more than once"):
        matrix_products(Graph("g", (_conv("convolution:w3", 3, 1, 1),)), ("convolution",))
