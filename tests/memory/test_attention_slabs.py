"""Attention over heads: the values read out of a projection's output, one head's block of its
columns at a time (``V[b, j, 32*h + e]``), as an imported model writes it."""

from __future__ import annotations

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor
from loopwise.memory.planner import plan

from .attention_graphs import fused_attention_ops

B, H, M, D = 1, 4, 64, 32


def _heads_attention() -> Graph:
    """scores[b, h, i, j] = Q[b, h, i, :] . K[b, h, j, :]; softmax over j; O[b, h, i, e] = sum_j
    P[b, h, i, j] * V[b, j, 32*h + e] (V never split into heads by a copy)."""
    act = lambda name, *shape: Tensor(name, shape)  # noqa: E731
    scores = Operator("scores", {"b": B, "h": H, "i": M, "j": M, "d": D},
                      (act("Q", B, H, M, D), act("K", B, H, M, D), act("S", B, H, M, M)),
                      reads=(Access("Q", ("b", "h", "i", "d")), Access("K", ("b", "h", "j", "d"))),
                      writes=(Access("S", ("b", "h", "i", "j")),), macs=B * H * M * M * D)
    softmax = Operator("softmax", {"b": B, "h": H, "i": M, "j": M}, (act("S", B, H, M, M), act("P", B, H, M, M)),
                       reads=(Access("S", ("b", "h", "i", "j")),), writes=(Access("P", ("b", "h", "i", "j")),),
                       coupled=frozenset({"j"}))
    mix = Operator("mix", {"b": B, "h": H, "i": M, "e": D, "j": M},
                   (act("P", B, H, M, M), act("V", B, M, H * D), act("O", B, H, M, D)),
                   reads=(Access("P", ("b", "h", "i", "j")), Access("V", ("b", "j", f"{D}*h + e"))),
                   writes=(Access("O", ("b", "h", "i", "e")),), macs=B * H * M * M * D)
    return Graph("heads-attention", (scores, softmax, mix))


def test_a_head_reads_its_own_block_of_columns_so_heads_can_carry_slabs():
    from loopwise.memory.slabs import slab_signatures

    mix = _heads_attention().operators[2]
    sig = slab_signatures(mix)
    assert sig["h"] == {"P": 1, "V": 2, "O": 1}
    assert "e" not in sig  # e reaches V only inside the head's block
    # a block wider than the stride would overlap the next head's: no slabs over h then
    wide = Operator("wide", {"h": H, "e": 2 * D}, (Tensor("V", (1, H * D + D)), Tensor("O", (H, 2 * D))),
                    reads=(Access("V", ("0", f"{D}*h + e")),), writes=(Access("O", ("h", "e")),))
    assert "h" not in slab_signatures(wide)


def _assert_one_group_head_by_head_at_compulsory_traffic(g: Graph, capacity: int) -> None:
    """``g`` plans as one group with slabs over the heads, at its compulsory traffic, and the
    independent replay passes the plan, recounting the same traffic within ``capacity``."""
    from loopwise.memory.verify import describe, verify

    p = plan(g, capacity_bytes=capacity)
    (grp,) = p.groups
    assert grp.slab is not None and "h" in (grp.slab.outer_dims or ()) + grp.slab.dims
    assert p.total_bytes == p.compulsory_bytes
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, "\n".join(describe(verdict))
    assert verdict.traffic_bytes == p.total_bytes and verdict.peak_bytes <= capacity


def test_attention_over_heads_keeps_every_score_on_chip_head_by_head():
    """One head's scores (8 KiB) and probabilities fit beside its keys and values, all heads' do
    not, nor do every head's keys and values for row slabs alone: the chain runs head by head (and
    query block by query block), and only Q, K, V and O move."""
    _assert_one_group_head_by_head_at_compulsory_traffic(_heads_attention(), 20 * 1024)


def _fused_attention() -> Graph:
    """Attention reading Q, K and V out of one fused projection output QKV[b, j, 3*H*D], as GPT-2's
    imported attention does: Q at ``D*h + d``, K at ``H*D + D*h + d``, V at ``2*H*D + D*h + e``."""
    return Graph("fused-attention", fused_attention_ops(B, H, M, D))


def test_a_tensor_read_at_rows_i_and_at_all_rows_j_is_not_sliced_by_i():
    """QK^T out of one fused tensor reads its query rows at i and its key rows at every j: a slab of
    query rows needs every key row, so QKV is an invariant of slabs over i (or j), not sliced; the
    heads slice it, each head reading its own block of columns past a constant offset."""
    from loopwise.memory.slabs import slab_signatures

    scores, _, mix = _fused_attention().operators
    sig = slab_signatures(scores)
    assert sig["i"] == {"QKV": None, "S": 2} and sig["j"] == {"QKV": None, "S": 3}
    assert sig["h"] == {"QKV": 2, "S": 1}
    assert slab_signatures(mix)["h"] == {"P": 1, "QKV": 2, "O": 1}


def test_attention_out_of_a_fused_projection_runs_head_by_head_and_fits_as_replayed():
    """The fused attention runs head by head with its scores on chip; QKV, read in three parts by
    two operators, is held as the union of the parts (the replay checks every load fits its buffer)."""
    _assert_one_group_head_by_head_at_compulsory_traffic(_fused_attention(), 24 * 1024)
