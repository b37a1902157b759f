"""What a plan's schedule gives an engineer who implements it: per group its loop nest (dimensions,
trip counts, tile or slab sizes, loop order), every buffer's offset in the scratchpad, and the DMA
transfers with the step and offset of each."""

from __future__ import annotations

import pytest

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, matmul
from loopwise.memory.planner import plan, plan_with_baseline
from loopwise.memory.schedule_loops import static_steps
from loopwise.memory.verify import describe, verify


def _batched(n: int = 4) -> Graph:
    """x[n, 64] -> scale -> y -> scale -> z: a chain that runs in slabs of the batch."""
    def scale(name, src, dst):
        return Operator(name, {"b": n, "i": 64}, (Tensor(src, (n, 64)), Tensor(dst, (n, 64))),
                        reads=(Access(src, ("b", "i")),), writes=(Access(dst, ("b", "i")),))
    return Graph("batched", (scale("s1", "x", "y"), scale("s2", "y", "z")), frozenset())


def test_an_operator_tiled_alone_gives_its_tile_sizes_and_loop_order():
    g = Graph("mm", (matmul("mm", 256, 256, 256),), frozenset({"B"}))
    p = plan(g, capacity_bytes=64 * 1024)
    [group] = p.schedule["groups"]
    nest = group["loop_nest"]
    assert nest["runs"] == "tiled" and nest["loops"] == []
    [op] = nest["operators"]
    assert sorted(op["order"]) == ["k", "m", "n"] and [loop["dim"] for loop in op["loops"]] == op["order"]
    for loop in op["loops"]:
        assert loop["extent"] == 256 and loop["trips"] == -(-256 // loop["tile"])
    assert any(loop["trips"] > 1 for loop in op["loops"])  # 384 KiB of operands do not fit 64 KiB whole


def test_a_group_in_slabs_names_its_slab_loop_in_every_operator():
    p = plan(_batched(), capacity_bytes=300)  # one row of x, y and z is 384 bytes: no; a slab of 1 row each
    [group] = [g for g in p.schedule["groups"] if len(g["operators"]) == 2] or pytest.fail(str(p.schedule))
    nest = group["loop_nest"]
    assert nest["runs"] == "slabs"
    [slab] = nest["loops"]
    assert slab["label"] == "slab" and slab["dims"] == ["b", "b"] and slab["extent"] == 4
    assert slab["trips"] == -(-4 // slab["size"])
    for op in nest["operators"]:
        assert op["order"] == ["b", "i"]
        assert op["loops"][0] == {"dim": "b", "extent": 4, "tile": slab["size"], "trips": slab["trips"], "loop": "slab"}
        assert op["loops"][1] == {"dim": "i", "extent": 64, "tile": 64, "trips": 1}


def test_every_buffer_has_an_offset_and_every_transfer_the_step_and_offset_it_uses():
    p = plan(_batched(), capacity_bytes=300)
    for group in p.schedule["groups"]:
        steps = {step["id"]: step for step, _ in static_steps(group["steps"])}
        for step in steps.values():
            for tensor, nbytes, labels, offset, size in step["alloc"]:
                assert 0 <= offset and offset + size <= 300
        for d in group["dma"]:
            assert d["step"] in steps and (d["from"], d["to"]) in (("dram", "scratchpad"), ("scratchpad", "dram"))
            allocated = {a[0]: a[3] for s in steps.values() for a in s["alloc"]}
            assert d["offset"] == allocated[d["tensor"]]
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, describe(verdict)
    assert verdict.traffic_bytes == sum(d["bytes"] for g in p.schedule["groups"] for d in g["dma"])


def test_a_plan_whose_buffers_fragment_is_planned_again_for_less_until_its_offsets_fit(monkeypatch):
    """First fit and largest first both forced to fail once: the plan is made again for a smaller
    scratchpad and placed in the whole one, and says so."""
    import loopwise.memory.placement as placement

    real, calls = placement._first_fit, []

    def fragmenting(buffers, capacity):
        calls.append(capacity)
        out = real(buffers, capacity)
        if len(calls) == 1:  # the first placement: pretend it ran past the end
            top = max(b.offset + b.size for b in buffers)
            for b in buffers:
                if b.offset + b.size == top:
                    b.offset = capacity
            return ["forced"]
        return out

    monkeypatch.setattr(placement, "_first_fit", fragmenting)
    monkeypatch.setattr(placement, "_largest_first", lambda buffers, capacity: ["forced"] * 99)
    p = plan(_batched(), capacity_bytes=300)
    assert 0 < p.planned_capacity_bytes < 300 and p.schedule["capacity_bytes"] == 300
    assert verify({"total_bytes": p.total_bytes, "schedule": p.schedule}).ok


def test_one_buffer_far_past_the_end_takes_at_most_a_tenth_of_the_room_per_attempt(monkeypatch):
    """The first placement leaves one buffer a whole scratchpad past the end: the plan is made
    again for at most a tenth less room (not for the room less that overflow, which leaves none),
    and its offsets then fit."""
    import loopwise.memory.placement as placement

    real, calls = placement._first_fit, []

    def far_off(buffers, capacity):
        calls.append(capacity)
        out = real(buffers, capacity)
        if len(calls) == 1:
            top = max(b.offset + b.size for b in buffers)
            for b in buffers:
                if b.offset + b.size == top:
                    b.offset = 2 * capacity
            return ["forced"]
        return out

    monkeypatch.setattr(placement, "_first_fit", far_off)
    monkeypatch.setattr(placement, "_largest_first", lambda buffers, capacity: ["forced"] * 99)
    p = plan(_batched(), capacity_bytes=300)
    assert 270 <= p.planned_capacity_bytes < 300 and p.schedule["capacity_bytes"] == 300
    assert verify({"total_bytes": p.total_bytes, "schedule": p.schedule}).ok


@pytest.mark.slow
@pytest.mark.parametrize("capacity", [24 * 2**20, 2**20])
def test_every_zoo_model_plan_places_its_buffers_without_a_violation(capacity):
    """Every zoo model (text models at 64 tokens), the planner's plan and the layer-by-layer
    baseline, at the NeuronCore-v2's 24 MiB and at 1 MiB: zero violations, offsets included."""
    from loopwise.memory.torch_import import load_torch
    from loopwise.memory.zoo import LLAMA, TEXT, ZOO

    failures = []
    for name in ZOO:
        seq = 64 if name in TEXT or name in LLAMA else None
        g = load_torch(f"zoo:{name}", batch=1, seq=seq, elem_bytes=2).graph
        for p in plan_with_baseline(g, capacity):
            verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
            if not verdict.ok or verdict.address_peak_bytes > capacity:
                failures.append(f"{name}: " + "; ".join(describe(verdict, limit=2)))
    assert not failures, "\n".join(failures)
