"""Flash-style plans from the planner: at a scratchpad too small for one head's keys, an attention's
softmax chain runs key block by key block inside its query blocks, with the online softmax's
running row maximum and sum on chip; its traffic is Q and O once and K and V once per query block,
and the independent replay agrees. A row operation that is not a softmax is never key-blocked."""

from __future__ import annotations

import pytest

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor
from loopwise.memory.planner import plan
from loopwise.memory.verify import describe, verify

HEADS, SEQ, D = 2, 512, 64
EACH = HEADS * SEQ * D * 2  # bytes of each of Q, K, V and O (bf16)
CAPACITY = 48 * 1024  # one head's K alone (64 KiB) does not fit


def _attention(row_kind: str = "softmax", lead: dict[str, int] | None = None) -> Graph:
    """scores = Q K^T per head; a row operation over the keys (``row_kind``); O = P V; ``lead``:
    the leading dimensions (the heads by default) and their extents."""
    lead = lead or {"h": HEADS}
    n = tuple(lead)
    t = lambda name, *shape: Tensor(name, (*lead.values(), *shape))  # noqa: E731
    scores = Operator("matmul:scores", {**lead, "i": SEQ, "j": SEQ, "d": D},
                      (t("Q", SEQ, D), t("K", SEQ, D), t("S", SEQ, SEQ)),
                      reads=(Access("Q", (*n, "i", "d")), Access("K", (*n, "j", "d"))),
                      writes=(Access("S", (*n, "i", "j")),), macs=HEADS * SEQ * SEQ * D)
    row = Operator(f"{row_kind}:p", {**lead, "i": SEQ, "j": SEQ}, (t("S", SEQ, SEQ), t("P", SEQ, SEQ)),
                   reads=(Access("S", (*n, "i", "j")),), writes=(Access("P", (*n, "i", "j")),),
                   coupled=frozenset({"j"}))
    mix = Operator("matmul:mix", {**lead, "i": SEQ, "e": D, "j": SEQ},
                   (t("P", SEQ, SEQ), t("V", SEQ, D), t("O", SEQ, D)),
                   reads=(Access("P", (*n, "i", "j")), Access("V", (*n, "j", "e"))),
                   writes=(Access("O", (*n, "i", "e")),), macs=HEADS * SEQ * SEQ * D)
    return Graph(f"attention-{row_kind}", (scores, row, mix))


def _replayed(p) -> None:
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, "\n".join(describe(verdict))
    assert verdict.traffic_bytes == p.total_bytes and verdict.peak_bytes <= CAPACITY


def test_attention_too_large_for_the_scratchpad_runs_in_key_blocks_at_the_hand_count():
    p = plan(_attention(), capacity_bytes=CAPACITY)
    (grp,) = p.groups
    slab = grp.slab
    assert slab is not None and slab.key_dims == ("j", "j", "j") and slab.key_size < SEQ
    assert slab.dims == ("i", "i", "i") and slab.size < SEQ
    query_blocks = -(-SEQ // slab.size)
    assert p.total_bytes == EACH + EACH + query_blocks * (EACH + EACH)  # Q, O once; K, V per query block
    assert set(grp.resident) == {"S", "P"}  # scores and probabilities never touch DRAM
    _replayed(p)
    # the best the planner can do: no other grouping of these operators comes near
    assert p.total_bytes < p.layer_by_layer_bytes / 2


@pytest.mark.slow  # the layer-by-layer tilings of its four-dimensional operators take long
def test_with_a_batch_and_heads_both_run_as_outer_loops_around_the_query_blocks():
    """A sequence and a head at a time: the blocks of one head fit as they do with one sequence."""
    p = plan(_attention(lead={"b": 2, "h": HEADS}), capacity_bytes=CAPACITY)
    (grp,) = p.groups
    slab = grp.slab
    assert (slab.batch_dims, slab.outer_dims) == (("b",) * 3, ("h",) * 3) and slab.key_dims == ("j",) * 3
    assert (slab.batch_size, slab.outer_size) == (1, 1)
    assert p.total_bytes == 2 * (EACH + EACH + -(-SEQ // slab.size) * (EACH + EACH))
    _replayed(p)
    nest = p.schedule["groups"][0]["loop_nest"]
    assert [loop["label"] for loop in nest["loops"]] == ["batch", "outer", "slab", "key"]


def test_the_schedule_names_the_key_loop_and_the_online_softmax_state():
    p = plan(_attention(), capacity_bytes=CAPACITY)
    (group,) = p.schedule["groups"]
    nest = group["loop_nest"]
    assert [loop["label"] for loop in nest["loops"]][-2:] == ["slab", "key"]
    assert nest["state"] == ["rowmax:softmax:p", "rowsum:softmax:p"]
    by_op = {o["operator"]: o for o in nest["operators"]}
    assert [loop.get("loop") for loop in by_op["matmul:mix"]["loops"] if loop.get("loop")][-1] == "key"

    def find(steps, label):
        for s in steps:
            if s.get("loop") == label:
                return s
            if "loop" in s:
                got = find(s["steps"], label)
                if got is not None:
                    return got
        return None

    slab_loop = find(group["steps"], "slab")
    before, key_loop, after = slab_loop["steps"]
    assert key_loop["loop"] == "key"
    assert {a[0] for a in before["alloc"]} >= {"Q", "O", "rowmax:softmax:p", "rowsum:softmax:p"}
    assert {f[0] for f in after["free"]} >= {"O", "rowmax:softmax:p", "rowsum:softmax:p"}
    stores = [d for d in group["dma"] if d["to"] == "dram"]
    assert [d["tensor"] for d in stores] == ["O"] and stores[0]["step"] == after["id"]


def test_a_layer_norm_over_the_keys_is_never_key_blocked():
    p = plan(_attention("native_layer_norm"), capacity_bytes=CAPACITY)
    assert all(g.slab is None or g.slab.key_dims is None for g in p.groups)
    _replayed(p)
    # the scores go out to DRAM and come back: far above the key-blocked softmax's traffic
    assert p.total_bytes > plan(_attention(), capacity_bytes=CAPACITY).total_bytes


@pytest.mark.parametrize("capacity", [4 * 1024 * 1024])
def test_attention_that_fits_in_query_blocks_is_not_key_blocked(capacity):
    """Where every score row fits, query blocks alone reach the compulsory traffic."""
    p = plan(_attention(), capacity_bytes=capacity)
    assert p.total_bytes == p.compulsory_bytes
    assert all(g.slab is None or g.slab.key_dims is None for g in p.groups)


def test_the_report_names_the_key_loop_and_the_online_softmax_state():
    from loopwise.memory.report_schedule import loop_nest_section

    p = plan(_attention(), capacity_bytes=CAPACITY)
    section = loop_nest_section({"schedule": p.schedule})
    shared = {row[2] for row in section.rows}
    assert len(shared) == 1
    (text,) = shared
    assert "key: 512 by" in text and "online softmax state: rowmax:softmax:p, rowsum:softmax:p" in text


def test_a_search_continued_from_its_record_makes_the_same_key_blocked_plan():
    import json

    from loopwise.memory.planner import plan_with_baseline

    states = {}
    first, _ = plan_with_baseline(_attention(), CAPACITY,
                                  on_searched=lambda i, state: states.__setitem__(i, json.loads(json.dumps(state))))
    again, _ = plan_with_baseline(_attention(), CAPACITY, searched=states)
    assert again.groups == first.groups and again.groups[0].slab.key_dims is not None


def test_the_time_objective_takes_key_blocks_where_transfers_bound_the_attention():
    from loopwise.memory.timing import Rates

    rates = Rates(dram_bytes_per_s=1e9, matrix_flops=1e12, vector_flops=1e11, capacity_bytes=CAPACITY)
    by_time = plan(_attention(), CAPACITY, objective="time", rates=rates)
    (grp,) = by_time.groups
    assert grp.slab is not None and grp.slab.key_dims is not None
    assert by_time.total_bytes == plan(_attention(), CAPACITY).total_bytes
    _replayed(by_time)
