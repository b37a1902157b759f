"""The replay of a tensor handed from one slab loop to the next on chip and freed slab by slab as
the next loop consumes it: hand-written plans where the freeing is what makes them fit, and plans
that claim the freed room while a later operator, a later slab or a later group still reads it."""

from __future__ import annotations

from loopwise.memory.verify import verify


def _loop(*steps) -> dict:
    return {"loop": "slab", "extent": 4, "size": 1, "steps": list(steps)}


def _handed(capacity: int = 600, free_by_slab: bool = True) -> dict:
    """Group 0 makes x (400 B) slab by slab from the input a and keeps it on chip; group 1 reads
    x slab by slab with the weight w (60 B, resident) and writes y over the slab of x it has just
    read, freeing that slab; group 2 reads y slab by slab into the output z. Buffers: x and y at
    [0, 400), a's and z's slab shares at [400, 500), w at [500, 560). ``free_by_slab`` False: x
    is freed whole after group 1's loop."""
    make = {"id": "0.0.0", "operator": "f", "uses": ["a", "x"],
            "alloc": [["a", 400, ["slab"], 400, 100], ["x", 400, ["slab"], 0, 400]], "free": [["a"]]}
    first = {"operators": ["f"], "traffic_bytes": 400, "peak_bytes": 500, "steps": [_loop(make)],
             "dma": [{"step": "0.0.0", "tensor": "a", "bytes": 400, "split": ["slab"], "from": "dram",
                      "to": "scratchpad", "offset": 400}]}
    load_w = {"id": "1.0", "operator": None, "uses": [], "alloc": [["w", 60, [], 500, 60]], "free": []}
    use = {"id": "1.1.0", "operator": "g", "uses": ["w", "x", "y"],
           "needs": [["x", 400, ["slab"]], ["w", 60, []]],
           "alloc": [["y", 400, ["slab"], 0, 400]], "free": [["x", 400, ["slab"]]] if free_by_slab else []}
    done = {"id": "1.2", "operator": None, "uses": [], "alloc": [], "free": [["w"]] + ([] if free_by_slab else [["x"]])}
    second = {"operators": ["g"], "traffic_bytes": 60, "peak_bytes": 560 if free_by_slab else 860,
              "steps": [load_w, _loop(use), done],
              "dma": [{"step": "1.0", "tensor": "w", "bytes": 60, "split": [], "from": "dram", "to": "scratchpad",
                       "offset": 500}]}
    out = {"id": "2.0.0", "operator": "h", "uses": ["y", "z"], "needs": [["y", 400, ["slab"]]],
           "alloc": [["z", 400, ["slab"], 400, 100]], "free": [["y", 400, ["slab"]], ["z"]]}
    third = {"operators": ["h"], "traffic_bytes": 400, "peak_bytes": 500, "steps": [_loop(out)],
             "dma": [{"step": "2.0.0", "tensor": "z", "bytes": 400, "split": ["slab"], "from": "scratchpad",
                      "to": "dram", "offset": 400}]}
    return {"total_bytes": 860, "schedule": {"capacity_bytes": capacity, "outputs": [["z", 400]],
                                             "groups": [first, second, third]}}


def test_a_tensor_freed_slab_by_slab_as_it_is_read_makes_room_for_the_next_in_place():
    verdict = verify(_handed())
    assert verdict.ok, verdict.violations
    assert verdict.traffic_bytes == 860
    # at g's step of slab k: x's slabs k..4, y's slabs 1..k (one slab of both), w
    assert [g.peak_bytes for g in verdict.groups] == [500, 560, 500]


def test_the_same_plan_holding_the_tensor_whole_until_its_loop_ends_does_not_fit():
    verdict = verify(_handed(free_by_slab=False))
    kinds = {v.kind for v in verdict.violations}
    assert "capacity" in kinds and "overlap" in kinds  # 860 bytes by slab 4; y over x while x is alive
    assert verify(_handed(capacity=1024, free_by_slab=False)).violations  # y still lies over x


def test_a_later_operator_of_the_same_slab_that_reads_the_freed_slab_is_rejected():
    plan = _handed()
    loop = plan["schedule"]["groups"][1]["steps"][1]
    loop["steps"].append({"id": "1.1.1", "operator": "k", "uses": ["x"], "needs": [["x", 400, ["slab"]]],
                          "alloc": [], "free": []})
    plan["schedule"]["groups"][1]["operators"].append("k")
    freed = [v for v in verify(plan).violations if v.kind == "freed"]
    assert [v.where for v in freed] == [f"group 1, slab {s}, operator k" for s in (1, 2, 3, 4)]
    assert freed[0].message == "x: needs bytes [0, 100) of it, freed before"


def test_a_later_slab_that_reads_all_of_the_tensor_is_rejected():
    plan = _handed()
    use = plan["schedule"]["groups"][1]["steps"][1]["steps"][0]
    use["needs"].append(["x", 400, []])  # every slab reads all of x: the slabs freed before are gone
    verdict = verify(plan)
    freed = [v for v in verdict.violations if v.kind == "freed"]
    assert [v.where for v in freed] == [f"group 1, slab {s}, operator g" for s in (2, 3, 4)]


def test_a_later_group_that_still_reads_the_tensor_is_rejected():
    plan = _handed()
    out = plan["schedule"]["groups"][2]["steps"][0]["steps"][0]
    out["uses"].append("x")
    out["needs"].append(["x", 400, ["slab"]])
    kinds = {v.kind for v in verify(plan).violations}
    assert {"freed", "missing"} <= kinds


def test_freeing_a_slab_twice_and_writing_over_a_slab_not_yet_read_are_rejected():
    plan = _handed()
    use = plan["schedule"]["groups"][1]["steps"][1]["steps"][0]
    use["free"].append(["x", 400, ["slab"]])
    assert "overfree" in {v.kind for v in verify(plan).violations}
    plan = _handed()
    use = plan["schedule"]["groups"][1]["steps"][1]["steps"][0]
    use["alloc"][0][3:] = [100, 400]  # y's slab k over x's slab k + 1, which is still to be read
    overlaps = [v for v in verify(plan).violations if v.kind == "overlap"]
    assert overlaps and overlaps[0].where == "group 1, slab 1, operator g"
    assert overlaps[0].message == "y [100, 200) overlaps x [100, 400), alive at the same time"


def test_a_tensor_loaded_whole_can_be_freed_slab_by_slab_and_written_over():
    plan = _handed()
    plan["schedule"]["groups"][0] = {
        "operators": ["f"], "traffic_bytes": 400, "peak_bytes": 400,
        "steps": [{"id": "0.0", "operator": "f", "uses": ["x"], "alloc": [["x", 400, [], 0, 400]], "free": []}],
        "dma": [{"step": "0.0", "tensor": "x", "bytes": 400, "split": [], "from": "dram", "to": "scratchpad",
                 "offset": 0}]}
    verdict = verify(plan)
    assert verdict.ok, verdict.violations
    assert [g.peak_bytes for g in verdict.groups] == [400, 560, 500]
