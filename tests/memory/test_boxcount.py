"""The closed-form counts of separable accesses agree with isl's, point for point: footprints of
boxes and the traffic of tilings (every tensor, every order's tile grid), on convolutions with
strides, padding, dilation and groups, transposed ones (whose written tiles overlap: left to isl),
a read of a concatenation's part (a guard), products and a constant index."""

from __future__ import annotations

import random

import pytest

from loopwise.memory import boxcount
from loopwise.memory.ir import Access, Operator, Tensor, conv2d, conv2d_nest, matmul
from loopwise.memory.polyhedral import footprint, footprint_isl
from loopwise.memory.tiling import _count, _maps, touched_per_tile, traffic, traffic_isl


def _from_nest(name: str, nest, shapes) -> Operator:
    names = ("X", "W")
    tensors = tuple(Tensor(t, shape) for t, shape in zip((*names, "Y"), shapes))
    reads = tuple(Access(t, index) for t, index in zip(names, nest.reads))
    return Operator(name, nest.dims, tensors, reads, (Access("Y", nest.write),))


def _concat_reader() -> Operator:
    """y[n, c, p] = relu of the concatenation of a [n, 3, 9] and b [n, 5, 9] along c, at 2*p + r - 1."""
    dims = {"n": 2, "c": 8, "p": 5, "r": 3}
    tensors = (Tensor("a", (2, 3, 9)), Tensor("b", (2, 5, 9)), Tensor("y", (2, 8, 5)))
    reads = (Access("a", ("n", "c", "2*p + r - 1"), "0 <= c < 3"),
             Access("b", ("n", "c - 3", "2*p + r - 1"), "3 <= c <= 7"))
    return Operator("cat", dims, tensors, reads, (Access("y", ("n", "c", "p")),))


def _constant_index() -> Operator:
    """y[m, n] = x[m, n] * s[0, n] - (1 - m): a broadcast row read at a constant and a reversed index."""
    dims = {"m": 6, "n": 10}
    tensors = (Tensor("x", (6, 10)), Tensor("s", (1, 10)), Tensor("z", (6,)), Tensor("y", (6, 10)))
    reads = (Access("x", ("m", "n")), Access("s", ("0", "n")), Access("z", ("5 - m",)))
    return Operator("bcast", dims, tensors, reads, (Access("y", ("m", "n")),))


def _heads() -> Operator:
    """y[l1, m] = sum over k of x[m, 4*(l1) + (k)] (the parenthesized form an importer writes)."""
    dims = {"l1": 3, "m": 5, "k": 4}
    tensors = (Tensor("x", (5, 12)), Tensor("y", (3, 5)))
    return Operator("heads", dims, tensors, (Access("x", ("m", "4*(l1) + (k)")),), (Access("y", ("(l1)", "m")),))


OPERATORS = [
    conv2d("c1", n=2, c=3, h=11, w=9, k=4, r=3, s=3, pad=1),
    conv2d("c2", n=1, c=4, h=13, w=13, k=6, r=3, s=3, stride=2, pad=1, dilation=2),
    conv2d("dw", n=2, c=6, h=9, w=9, k=6, r=3, s=3, pad=1, groups=3),
    conv2d("pw", n=2, c=4, h=8, w=8, k=4, r=1, s=1, stride=2),
    _from_nest("tconv", conv2d_nest(1, 4, 4, 3, 3, 2, (11, 11), (5, 5), stride=(2, 2), pad=(1, 1), transposed=True),
               ((1, 4, 5, 5), (4, 2, 3, 3), (1, 4, 11, 11))),
    matmul("mm", 12, 10, 14),
    _concat_reader(),
    _constant_index(),
    _heads(),
]


def _tilings(op: Operator, rng: random.Random, n: int):
    for _ in range(n):
        tiles = {d: rng.randint(1, e) for d, e in op.dims.items() if rng.random() < 0.7}
        order = list(op.dims)
        rng.shuffle(order)
        yield tiles, order


@pytest.mark.parametrize("op", OPERATORS, ids=lambda op: op.name)
def test_traffic_in_closed_form_is_isls_count(op):
    rng = random.Random(7)
    for tiles, order in _tilings(op, rng, 25):
        assert traffic(op, tiles, order) == traffic_isl(op, tiles, order), (tiles, order)


@pytest.mark.parametrize("op", OPERATORS, ids=lambda op: op.name)
def test_touched_per_tile_and_footprints_in_closed_form_are_isls(op):
    rng = random.Random(11)
    for tiles, _ in _tilings(op, rng, 10):
        by_isl = {name: _count(touched) for name, touched in _maps(op, tiles, list(op.dims))[0].items()}
        assert touched_per_tile(op, tiles) == by_isl, tiles
        for t in op.tensors:
            box = {d: (rng.randint(-2, e), rng.randint(1, e)) for d, e in op.dims.items() if rng.random() < 0.6}
            assert footprint(op, t.name, box) == footprint_isl(op, t.name, box), (t.name, box)


def test_which_accesses_are_counted_in_closed_form():
    cat, tconv = _concat_reader(), OPERATORS[4]
    # the part read where 3 <= c <= 7, at c - 3: the values 0..4 of that index
    assert boxcount.positions(cat, "b") == (((("n", 1),), 0, 0, 2), ((("c", 1),), -3, 0, 5),
                                            ((("p", 2), ("r", 1)), -1, 0, 9))
    # the written tiles of a transposed convolution overlap without being equal: isl counts them
    grid = ("i",)
    assert boxcount.tensor_traffic(tconv, "Y", True, grid, {**tconv.dims, "i": 2}, {**{d: 1 for d in tconv.dims}, "i": 3}) is None
    assert boxcount.parse_affine("floor(p/2)", {"p": 4}) is None
    assert boxcount.parse_affine("2*p - r + 3", {"p": 4, "r": 3}) == ((("p", 2), ("r", -1)), 3)
    assert boxcount.parse_affine("1536 + 64*(l1) + ((n))", {"l1": 12, "n": 64}) == ((("l1", 64), ("n", 1)), 1536)
    assert boxcount.parse_affine("floor(((k))/64)", {"k": 768}) is None
    assert boxcount.parse_affine("((k)) mod 64", {"k": 768}) is None
