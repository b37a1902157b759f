"""Groups whose operators run in several loops inside one outer slab: a fused projection run
row block by row block, then the attention over its output query block by query block, both
within one sequence at a time, the projection's output kept on chip between the two loops."""

from __future__ import annotations

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor
from loopwise.memory.planner import plan

from .attention_graphs import fused_attention_ops

B, H, M, D = 4, 4, 64, 16
C = H * D


def _gpt2_block() -> Graph:
    """QKV[b, i, n] = X[b, i, :] . W[:, n] (n < 3C), then attention reading its query, key and
    value parts per head (``D*h + d``, ``C + D*h + d``, ``2C + D*h + e``), then the output
    projection reading the heads back as rows (``O[b, floor(k/D), i, k mod D]``)."""
    act = lambda name, *shape: Tensor(name, shape)  # noqa: E731
    qkv = act("QKV", B, M, 3 * C)
    project = Operator("project", {"b": B, "i": M, "n": 3 * C, "k": C},
                       (act("X", B, M, C), act("W", C, 3 * C), qkv),
                       reads=(Access("X", ("b", "i", "k")), Access("W", ("k", "n"))),
                       writes=(Access("QKV", ("b", "i", "n")),), macs=B * M * 3 * C * C)
    scores, softmax, mix = fused_attention_ops(B, H, M, D)
    out = Operator("out", {"b": B, "i": M, "n": C, "k": C},
                   (act("O", B, H, M, D), act("WO", C, C), act("Y", B, M, C)),
                   reads=(Access("O", ("b", f"floor((k)/{D})", "i", f"(k) mod {D}")), Access("WO", ("k", "n"))),
                   writes=(Access("Y", ("b", "i", "n")),), macs=B * M * C * C)
    return Graph("gpt2-block", (project, scores, softmax, mix, out))


CAPACITY = 80 * 1024  # one sequence's QKV (24 KiB) fits beside the weights (32 KiB); all four (96 KiB) do not


def test_the_fused_projection_output_stays_on_chip_between_its_loop_and_the_attention_loop():
    """One group, one sequence at a time: the projection's row blocks fill that sequence's QKV,
    the attention reads it whole query block by query block; QKV never goes to DRAM, and the
    independent replay passes the plan within the capacity, recounting its traffic."""
    from loopwise.memory.verify import describe, verify

    g = _gpt2_block()
    assert g.nbytes("QKV") // B <= CAPACITY < g.nbytes("QKV")
    p = plan(g, capacity_bytes=CAPACITY)
    (grp,) = [grp for grp in p.groups if "project" in grp.operators]
    assert {"project", "scores", "mix"} <= set(grp.operators)
    assert "QKV" in grp.resident
    assert grp.slab is not None and grp.slab.outer_dims is not None
    assert p.total_bytes == p.compulsory_bytes
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, "\n".join(describe(verdict))
    assert verdict.traffic_bytes == p.total_bytes and verdict.peak_bytes <= CAPACITY


def test_the_schedule_says_what_each_operator_needs_so_a_reader_moved_into_the_producer_loop_fails():
    """The plan's schedule lists what every operator reads; moved into the projection's loop, the
    scores would read QKV while only some of its row blocks are made, and the replay says so."""
    from loopwise.memory.schedule_loops import static_steps
    from loopwise.memory.verify import verify

    p = plan(_gpt2_block(), capacity_bytes=CAPACITY)
    (group,) = [g for g in p.schedule["groups"] if "project" in g["operators"]]
    (outer,) = [s for s in group["steps"] if s.get("loop") == "outer"]
    loops = [s for s in outer["steps"] if s.get("loop") == "slab"]
    assert len(loops) == 2 and [s["operator"] for s in loops[0]["steps"]] == ["project"]
    (scores,) = [s for s, _ in static_steps(group["steps"]) if s["operator"] == "scores"]
    # the query and key parts of QKV, a sequence at a time
    assert ["QKV", 2 * _gpt2_block().nbytes("QKV") // 3, ["outer"]] in scores["needs"]
    loops[1]["steps"].remove(scores)
    loops[0]["steps"].append(scores)
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert "incomplete" in {v.kind for v in verdict.violations}
