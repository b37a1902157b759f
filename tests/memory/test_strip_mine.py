"""Projections read block by block: a norm feeding two projections whose outputs a per-head
epilogue (a rotary-style half swap) reads one head's columns at a time. The planner strip-mines
each projection's output columns into heads, so the projections and their epilogues run head by
head with the normalized input held once for both."""

from __future__ import annotations

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor
from loopwise.memory.polyhedral import footprint
from loopwise.memory.slabs import slab_signatures
from loopwise.memory.strip_mine import split_dimension, strip_mined

from .verified_plans import verified_plan

M, K, H, D = 64, 64, 4, 16  # tokens, width, heads, head size
N = H * D
HALF = D // 2


def _t(name: str, *shape: int) -> Tensor:
    return Tensor(name, shape)


def _projection(name: str, weight: str, out: str) -> Operator:
    """out[m, n] = sum_k y[m, k] * weight[n, k]."""
    return Operator(name, {"m": M, "n": N, "k": K}, (_t("y", M, K), _t(weight, N, K), _t(out, M, N)),
                    reads=(Access("y", ("m", "k")), Access(weight, ("n", "k"))), writes=(Access(out, ("m", "n")),),
                    macs=M * N * K)


def _rotate(name: str, src: str, out: str) -> Operator:
    """out[h, m, d] = f(src[m, D*h + d], src[m, D*h + (d +- D/2)]): each head's own columns, the
    halves swapped under guards, as an imported rotary embedding reads them."""
    return Operator(name, {"h": H, "m": M, "d": D}, (_t(src, M, N), _t(out, H, M, D)),
                    reads=(Access(src, ("m", f"{D}*(h) + (d)")),
                           Access(src, ("m", f"{D}*(h) + ({HALF} + d)"), f"0 <= d < {HALF}"),
                           Access(src, ("m", f"{D}*(h) + (d - {HALF})"), f"{HALF} <= d < {D}")),
                    writes=(Access(out, ("h", "m", "d")),))


def _norm_two_projections() -> Graph:
    """s[m] = sum_k x[m, k]^2; y = x * s; q = y Wq and k = y Wk, each rotated head by head."""
    square = Operator("sumsq", {"m": M, "k": K}, (_t("x", M, K), _t("s", M, 1)),
                      reads=(Access("x", ("m", "k")),), writes=(Access("s", ("m", "0")),))
    scale = Operator("scale", {"m": M, "k": K}, (_t("x", M, K), _t("s", M, 1), _t("y", M, K)),
                     reads=(Access("x", ("m", "k")), Access("s", ("m", "0"))), writes=(Access("y", ("m", "k")),))
    ops = (square, scale, _projection("proj_q", "wq", "q"), _rotate("rot_q", "q", "qr"),
           _projection("proj_k", "wk", "k"), _rotate("rot_k", "k", "kr"))
    return Graph("norm-two-projections", ops, frozenset({"wq", "wk"}))


def test_a_guarded_half_of_a_head_is_still_that_heads_block():
    sig = slab_signatures(_rotate("rot", "q", "qr"))
    assert sig["h"] == {"q": 1, "qr": 0}
    # without its guard the shifted half would reach the previous head's columns: no slabs over h
    loose = Operator("loose", {"h": H, "d": D}, (_t("q", M, N), _t("o", H, D)),
                     reads=(Access("q", ("0", f"{D}*(h) + (d - {HALF})")),), writes=(Access("o", ("h", "d")),))
    assert "h" not in slab_signatures(loose)


def test_a_split_projection_touches_the_same_points():
    proj = _projection("proj_q", "wq", "q")
    split = split_dimension(proj, "n", D)
    assert split.dims == {"m": M, "n_b": H, "n_i": D, "k": K}
    for t in ("y", "wq", "q"):
        assert footprint(split, t, {}) == footprint(proj, t, {})
    assert slab_signatures(split)["n_b"] == {"y": None, "wq": 0, "q": 1}


def test_only_a_dimension_read_in_blocks_is_split():
    ops = strip_mined(_norm_two_projections().operators)
    assert {op.name: tuple(op.dims) for op in ops} == {
        "sumsq": ("m", "k"), "scale": ("m", "k"), "proj_q": ("m", "n_b", "n_i", "k"), "rot_q": ("h", "m", "d"),
        "proj_k": ("m", "n_b", "n_i", "k"), "rot_k": ("h", "m", "d")}


def test_two_projections_share_one_read_of_the_normalized_input_head_by_head():
    """16 KiB holds y (8 KiB) with one head's weight rows, projection and rotation (2 KiB each), not
    a whole weight beside y and q: the norm keeps y on chip, both projections and their rotations
    run head by head, and only x, the weights and the rotated outputs move."""
    g = _norm_two_projections()
    p = verified_plan(g, 16 * 1024)
    assert p.total_bytes == g.compulsory_bytes() == 2 * (M * K + 2 * N * K + 2 * M * N)
    fused = [grp for grp in p.groups if {"proj_q", "proj_k"} <= set(grp.operators)]
    slab = fused[0].slab if len(fused) == 1 else None
    assert slab is not None and "n_b" in slab.dims + (slab.outer_dims or ())
    assert set(fused[0].operators) >= {"rot_q", "rot_k"} and "y" in fused[0].carried_in


def test_without_room_for_the_normalized_input_the_projections_do_not_share_it():
    """At 8 KiB y alone fills the scratchpad: it cannot stay on chip while a weight streams, so no
    group holds it for both projections and the plan moves more than the compulsory traffic."""
    g = _norm_two_projections()
    p = verified_plan(g, 8 * 1024)
    assert p.total_bytes > g.compulsory_bytes()
    assert not any("y" in grp.carried_in or "y" in grp.resident for grp in p.groups
                   if {"proj_q", "proj_k"} <= set(grp.operators))
