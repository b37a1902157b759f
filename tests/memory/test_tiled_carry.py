"""A product whose reduction is too long to fit, then an elementwise add of a residual: the
product runs alone, tiled, with its whole output as one accumulator, and keeps that output on
chip for the add instead of storing it and loading it again."""

from __future__ import annotations

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise

from .verified_plans import verified_plan

M, N, K = 64, 64, 512


def _product_then_add() -> Graph:
    """p[m, n] = sum_k h[m, k] * w[n, k]; y = p + r."""
    t = lambda name, *shape: Tensor(name, shape)  # noqa: E731
    product = Operator("down", {"m": M, "n": N, "k": K}, (t("h", M, K), t("w", N, K), t("p", M, N)),
                       reads=(Access("h", ("m", "k")), Access("w", ("n", "k"))), writes=(Access("p", ("m", "n")),),
                       macs=M * N * K)
    return Graph("product-then-add", (product, elementwise("add", (M, N), ("r", "p"), "y")), frozenset({"w"}))


def test_a_tiled_product_keeps_its_whole_accumulator_for_the_add_after_it():
    """24 KiB holds the 8 KiB accumulator with chunks of h and w along k, not h or w whole (64 KiB
    each): the product streams them once, and its output never reaches DRAM."""
    g = _product_then_add()
    p = verified_plan(g, 24 * 1024)
    assert p.total_bytes == g.compulsory_bytes() == 2 * (M * K + N * K + 2 * M * N)
    product, add = p.groups
    assert product.tiled and product.carried_out == ("p",) and add.carried_in == ("p",)


def test_an_accumulator_that_does_not_fit_whole_is_stored():
    """At 8 KiB the output alone fills the scratchpad: its tiles are stored as they finish, and
    the add loads them again."""
    g = _product_then_add()
    p = verified_plan(g, 8 * 1024)
    assert not any(grp.carried_out for grp in p.groups)
    assert p.total_bytes > g.compulsory_bytes()


def test_a_boundary_offers_every_crossing_tensor_or_else_the_new_ones():
    """Kept together where they fit; where they do not, the tensors the operator just before the
    boundary made, if the others wait (read no earlier than these); else nothing."""
    from loopwise.memory.grouping import carry_sets

    producer, made = {"res": 0, "norm": 4}, {"res": 10, "norm": 10}
    waits = {"res": [0, 3, 9], "norm": [4, 5, 6]}  # res read again at 9, after norm's first read at 5
    assert carry_sets(["norm", "res"], producer, waits, 5, made, 20) == [(), ("norm", "res")]
    assert carry_sets(["norm", "res"], producer, waits, 5, made, 15) == [(), ("norm",)]
    first = {"res": [0, 3, 5], "norm": [4, 6]}  # res read at 5, before norm is
    assert carry_sets(["norm", "res"], producer, first, 5, made, 15) == [()]
    assert carry_sets(["norm", "res"], producer, waits, 5, made, 5) == [()]
