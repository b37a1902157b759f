"""The replay checks where the data on chip comes from, not only the byte sums: hand-written plans
that drop a load or a store and lower their claims to match, and one that frees a tensor twice."""

from __future__ import annotations

from loopwise.memory.verify import verify

from .test_verify_handed_slabs import _handed


def _kinds(plan: dict) -> set[str]:
    return {v.kind for v in verify(plan).violations}


def _spilled(store: bool = True) -> dict:
    """Group 0 makes x (400 B) slab by slab from the input a and stores it; group 1 loads x back
    slab by slab and makes the output z from it. ``store`` False: x's store is dropped and the
    claims lowered by its bytes."""
    loop = lambda *steps: {"loop": "slab", "extent": 4, "size": 1, "steps": list(steps)}  # noqa: E731
    make = {"id": "0.0.0", "operator": "f", "uses": ["a", "x"], "needs": [["a", 400, ["slab"]]],
            "alloc": [["a", 400, ["slab"], 400, 100], ["x", 400, ["slab"], 0, 400]], "free": [["a"]]}
    spill = {"id": "0.1", "operator": None, "uses": [], "alloc": [], "free": [["x"]]}
    first = {"operators": ["f"], "traffic_bytes": 800 if store else 400, "peak_bytes": 500,
             "steps": [loop(make), spill],
             "dma": [{"step": "0.0.0", "tensor": "a", "bytes": 400, "split": ["slab"], "from": "dram",
                      "to": "scratchpad", "offset": 400}]
             + ([{"step": "0.1", "tensor": "x", "bytes": 400, "split": [], "from": "scratchpad", "to": "dram",
                  "offset": 0}] if store else [])}
    use = {"id": "1.0.0", "operator": "g", "uses": ["x", "z"], "needs": [["x", 400, ["slab"]]],
           "alloc": [["x", 400, ["slab"], 0, 100], ["z", 400, ["slab"], 100, 100]], "free": [["x"], ["z"]]}
    second = {"operators": ["g"], "traffic_bytes": 800, "peak_bytes": 200, "steps": [loop(use)],
              "dma": [{"step": "1.0.0", "tensor": "x", "bytes": 400, "split": ["slab"], "from": "dram",
                       "to": "scratchpad", "offset": 0},
                      {"step": "1.0.0", "tensor": "z", "bytes": 400, "split": ["slab"], "from": "scratchpad",
                       "to": "dram", "offset": 100}]}
    return {"total_bytes": 1600 if store else 1200,
            "schedule": {"capacity_bytes": 1000, "outputs": [["z", 400]], "groups": [first, second]}}


def test_an_intermediate_stored_and_loaded_back_replays():
    assert verify(_spilled()).ok, verify(_spilled()).violations


def test_loading_back_an_intermediate_whose_store_was_dropped_is_rejected_even_with_the_claims_lowered():
    verdict = verify(_spilled(store=False))
    assert verdict.traffic_bytes == verdict.claimed_traffic_bytes  # the byte sums agree
    unstored = [v for v in verdict.violations if v.kind == "unstored"]
    assert [v.where for v in unstored] == ["group 1, slab 1, operator g"]
    assert unstored[0].message == "x is loaded, but the operator that made it never stored it"


def test_a_weight_read_on_chip_whose_load_was_dropped_is_rejected_even_with_the_claims_lowered():
    plan = _handed()
    second = plan["schedule"]["groups"][1]
    second["dma"] = [d for d in second["dma"] if d["tensor"] != "w"]
    second["traffic_bytes"] -= 60
    plan["total_bytes"] -= 60
    verdict = verify(plan)
    assert verdict.traffic_bytes == verdict.claimed_traffic_bytes
    unloaded = [v for v in verdict.violations if v.kind == "unloaded"]
    assert [v.where for v in unloaded] == ["group 1, slab 1, operator g"]
    assert unloaded[0].message == "w is read on chip, but was never loaded nor made there"


def test_storing_a_buffer_nothing_was_written_to_is_rejected():
    plan = _handed()
    first = plan["schedule"]["groups"][0]
    first["steps"].append({"id": "0.1", "operator": None, "uses": [], "alloc": [["b", 40, [], 560, 40]],
                           "free": [["b"]]})
    first["dma"].append({"step": "0.1", "tensor": "b", "bytes": 40, "split": [], "from": "scratchpad",
                         "to": "dram", "offset": 560})
    first["traffic_bytes"] += 40
    plan["total_bytes"] += 40
    assert _kinds(plan) == {"unloaded"}


def test_freeing_a_whole_tensor_after_every_part_of_it_was_freed_is_rejected():
    plan = _handed()
    plan["schedule"]["groups"][1]["steps"][2]["free"].append(["x"])  # x's four parts are gone already
    overfree = [v for v in verify(plan).violations if v.kind == "overfree"]
    assert [(v.where, v.message) for v in overfree] == [
        ("group 1, slab -, transfers", "x: frees all of it, with no byte of it on chip")]
