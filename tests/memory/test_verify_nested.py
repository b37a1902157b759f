"""The replay of a group with several inner loops inside its outer slab: a producer loop fills a
tensor slab by slab, a consumer loop reads all of it; hand-written plans that overflow at the
inner level, and one whose consumer reads the tensor before every slab of it is made."""

from __future__ import annotations

from loopwise.memory.verify import verify


def _nested(capacity: int, s_bytes: int = 320, consumer_inside: bool = False) -> dict:
    """Two sequences (outer loop), each: loop 1 reads x (80 B in all) four slabs at a time into q
    (q's parts accumulate to 200 B per sequence); loop 2 reads that sequence's q whole and writes
    s (``s_bytes`` in all) slab by slab; q is freed after loop 2. Buffers: q at 0 (200 B), x's and
    s's slab shares at 200. ``consumer_inside``: the consumer runs in loop 1, right after the
    producer, reading q before the sequence's slabs of it are all made."""
    made = {"id": "0.0.0.0", "operator": "p", "uses": ["x", "q"],
            "alloc": [["x", 80, ["outer", "slab"], 200, 10], ["q", 400, ["outer", "slab"], 0, 200]],
            "free": [["x"]]}
    read = {"id": "0.0.1.0", "operator": "c", "uses": ["q", "s"], "needs": [["q", 400, ["outer"]]],
            "alloc": [["s", s_bytes, ["outer", "slab"], 200, s_bytes // 8]], "free": [["s"]]}
    done = {"id": "0.0.2", "operator": None, "uses": [], "alloc": [], "free": [["q"]]}
    if consumer_inside:
        read["id"] = "0.0.0.1"
        body = [{"loop": "slab", "extent": 4, "size": 1, "steps": [made, read]}, done]
        done["id"] = "0.0.1"
    else:
        body = [{"loop": "slab", "extent": 4, "size": 1, "steps": [made]},
                {"loop": "slab", "extent": 4, "size": 1, "steps": [read]}, done]
    dma = [{"step": made["id"], "tensor": "x", "bytes": 80, "split": ["outer", "slab"], "from": "dram",
            "to": "scratchpad", "offset": 200},
           {"step": read["id"], "tensor": "s", "bytes": s_bytes, "split": ["outer", "slab"], "from": "scratchpad",
            "to": "dram", "offset": 200}]
    group = {"operators": ["p", "c"], "traffic_bytes": 80 + s_bytes, "peak_bytes": 200 + s_bytes // 8, "dma": dma,
             "steps": [{"loop": "outer", "extent": 2, "size": 1, "steps": body}]}
    return {"total_bytes": 80 + s_bytes,
            "schedule": {"capacity_bytes": capacity, "outputs": [["s", s_bytes]], "groups": [group]}}


def test_a_consumer_loop_after_the_producer_loop_replays_within_the_capacity():
    verdict = verify(_nested(capacity=256))
    assert verdict.ok, verdict.violations
    assert verdict.traffic_bytes == 400 and verdict.peak_bytes == 240  # q 200 + s's slab 40


def test_an_inner_loop_that_overflows_is_caught_at_each_of_its_slabs_in_each_outer_slab():
    # loop 1 peaks at q 200 + x 10 = 210; loop 2 at q 200 + s 40 = 240 against 230
    verdict = verify(_nested(capacity=230))
    capacity = [v for v in verdict.violations if v.kind == "capacity"]
    assert [v.where for v in capacity] == [f"group 0, slab {o}.{t}, operator c" for o in (1, 2) for t in (1, 2, 3, 4)]
    assert {v.needed_bytes for v in capacity} == {240}
    assert {v.kind for v in verdict.violations} == {"capacity", "range"}  # s's buffer [200, 240) too
    assert verify(_nested(capacity=230, s_bytes=160)).ok  # s's slab 20: 220 fits


def test_a_read_before_every_slab_of_its_tensor_is_made_is_rejected():
    """The consumer inside the producer's loop holds a quarter, a half, three quarters of the
    sequence's q when it needs all of it: the bytes fit, the data is not there yet."""
    verdict = verify(_nested(capacity=256, consumer_inside=True))
    incomplete = [v for v in verdict.violations if v.kind == "incomplete"]
    assert [v.where for v in incomplete] == [f"group 0, slab {o}.{t}, operator c" for o in (1, 2) for t in (1, 2, 3)]
    assert incomplete[0].message == "q: needs 200 bytes on chip, holds 50"
    assert {v.kind for v in verdict.violations} == {"incomplete"}
