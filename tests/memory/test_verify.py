"""The independent plan check: a schedule replayed slab by slab against the capacity, its traffic
recounted from the loads and stores it lists, on hand-made plans and on the planner's own."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from loopwise.cli import app
from loopwise.memory.verify import PlanFormatError, verify


def _tiny(capacity: int, load_w: bool = True) -> dict:
    """x (400 B) streamed in 4 slabs through one operator into y (400 B), which stays on chip for the
    next group (its parts accumulate); w (20 B) kept for every slab. Then y is read and stored.
    Buffers: w at 0, y at 20 (all 400 bytes reserved from its first part), x's slab share at 420."""
    body = {"id": "0.1.0", "operator": "f", "uses": ["w", "x", "y"],
            "alloc": [["x", 400, ["slab"], 420, 100], ["y", 400, ["slab"], 20, 400]], "free": [["x"]]}
    prologue = {"id": "0.0", "operator": None, "uses": [], "alloc": [["w", 20, [], 0, 20]], "free": []}
    epilogue = {"id": "0.2", "operator": None, "uses": [], "alloc": [], "free": [["w"]]}
    dma = [{"step": "0.0", "tensor": "w", "bytes": 20, "split": [], "from": "dram", "to": "scratchpad", "offset": 0},
           {"step": "0.1.0", "tensor": "x", "bytes": 400, "split": ["slab"], "from": "dram", "to": "scratchpad",
            "offset": 420}]
    first = {"operators": ["f"], "traffic_bytes": 420, "peak_bytes": 520, "dma": dma if load_w else dma[1:],
             "steps": [prologue, {"loop": "slab", "extent": 8, "size": 2, "steps": [body]}, epilogue]}
    store = {"id": "1.0", "operator": "g", "uses": ["y", "z"], "alloc": [["z", 400, [], 420, 400]],
             "free": [["y"], ["z"]]}
    second = {"operators": ["g"], "traffic_bytes": 400, "peak_bytes": 800, "steps": [store],
              "dma": [{"step": "1.0", "tensor": "z", "bytes": 400, "split": [], "from": "scratchpad", "to": "dram",
                       "offset": 420}]}
    return {"total_bytes": 820, "schedule": {"capacity_bytes": capacity, "outputs": [["z", 400]],
                                             "groups": [first, second]}}


def test_a_plan_that_fits_passes_with_its_traffic_recounted():
    verdict = verify(_tiny(capacity=1024))
    assert verdict.ok, verdict.violations
    assert verdict.traffic_bytes == verdict.claimed_traffic_bytes == 820
    assert [g.peak_bytes for g in verdict.groups] == [520, 800]


def test_slab_parts_kept_for_the_next_group_accumulate_until_the_capacity_breaks():
    # at slab k: w 20 + y's k parts of 100 + x's part 100; the fourth slab needs 520 against 480
    verdict = verify(_tiny(capacity=480))
    capacity = [v for v in verdict.violations if v.kind == "capacity"]
    assert [(v.where, v.needed_bytes, v.capacity_bytes) for v in capacity] == [
        ("group 0, slab 4, operator f", 520, 480), ("group 1, slab -, operator g", 800, 480)]
    assert not verdict.ok


def test_a_load_missing_from_the_list_makes_the_recounted_traffic_differ():
    verdict = verify(_tiny(capacity=1024, load_w=False))
    assert not verdict.ok and verdict.traffic_bytes == 800 and verdict.claimed_traffic_bytes == 820
    assert {v.kind for v in verdict.violations} == {"traffic"}
    assert any("moves 400 bytes, the plan claims 420" in v.message for v in verdict.violations)


def test_a_buffer_left_on_chip_an_output_never_stored_and_a_read_with_no_buffer_fail():
    plan = _tiny(capacity=1024)
    second = plan["schedule"]["groups"][1]["steps"][0]
    second["free"] = [["z"]]  # y stays
    plan["schedule"]["groups"][1]["dma"] = []  # z never leaves
    second["uses"].append("q")  # q was never brought in
    plan["total_bytes"] = 420
    plan["schedule"]["groups"][1]["traffic_bytes"] = 0
    kinds = {v.kind for v in verify(plan).violations}
    assert kinds == {"leftover", "output", "missing"}


def test_a_split_over_a_loop_that_does_not_enclose_it_is_not_a_plan():
    plan = _tiny(capacity=1024)
    plan["schedule"]["groups"][1]["steps"][0]["alloc"] = [["z", 400, ["slab"], 420, 400]]
    with pytest.raises(PlanFormatError, match="does not enclose it"):
        verify(plan)


def test_verify_command_exit_status_and_one_line_errors(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_tiny(capacity=1024)))
    bad.write_text(json.dumps(_tiny(capacity=480)))
    result = CliRunner().invoke(app, ["memory", "verify", str(good)])
    assert result.exit_code == 0 and result.output.startswith("PASS"), result.output
    result = CliRunner().invoke(app, ["memory", "verify", str(bad), "--json"])
    assert result.exit_code == 1 and json.loads(result.output)["ok"] is False
    for path, words in ((tmp_path / "none.json", "no such file"), (tmp_path / "text.json", "not JSON"),
                        (tmp_path / "other.json", "no \"schedule\"")):
        if path.name != "none.json":
            path.write_text("hello" if path.name == "text.json" else json.dumps({"model": "x"}))
        result = CliRunner().invoke(app, ["memory", "verify", str(path)])
        assert result.exit_code != 0 and words in str(result.exception) and "\n" not in str(result.exception)


def test_buffers_that_overlap_or_leave_the_scratchpad_are_rejected_with_where_and_what():
    plan = _tiny(capacity=1024)
    first = plan["schedule"]["groups"][0]
    first["steps"][1]["steps"][0]["alloc"][0][3] = 300  # x's slab share [300, 400) inside y's [20, 420)
    first["dma"][1]["offset"] = 300
    plan["schedule"]["groups"][1]["steps"][0]["alloc"][0][3] = 700  # z [700, 1100) past 1024
    plan["schedule"]["groups"][1]["dma"][0]["offset"] = 700
    verdict = verify(plan)
    assert not verdict.ok
    overlaps = [v for v in verdict.violations if v.kind == "overlap"]
    assert len(overlaps) == 4  # once per slab
    assert [v.where for v in overlaps] == [f"group 0, slab {k}, operator f" for k in (1, 2, 3, 4)]
    # slab 1 makes y's buffer beside x's; later slabs make x's beside y's
    assert overlaps[0].message == "y [20, 420) overlaps x [300, 400), alive at the same time"
    assert overlaps[1].message == "x [300, 400) overlaps y [20, 420), alive at the same time"
    out_of_range = [v for v in verdict.violations if v.kind == "range"]
    assert [(v.where, v.message) for v in out_of_range] == [
        ("group 1, slab -, operator g", "z: buffer [700, 1100) lies outside the scratchpad [0, 1024)")]
    assert {v.kind for v in verdict.violations} == {"overlap", "range"}  # bytes alone would fit
    assert verdict.address_peak_bytes == 1100


def test_a_transfer_to_another_offset_or_an_allocation_without_one_is_rejected():
    plan = _tiny(capacity=1024)
    plan["schedule"]["groups"][1]["dma"][0]["offset"] = 0  # z's store reads from where w was
    verdict = verify(plan)
    assert [(v.kind, v.message) for v in verdict.violations] == [
        ("offset", "the store of z names offset 0, its buffer is at 420")]
    plan = _tiny(capacity=1024)
    plan["schedule"]["groups"][1]["steps"][0]["alloc"] = [["z", 400]]
    assert [v.message for v in verify(plan).violations] == ["z: an allocation with no scratchpad offset"]


def test_the_traffic_is_recounted_from_the_dma_list_and_its_steps_must_exist():
    plan = _tiny(capacity=1024)
    plan["schedule"]["groups"][0]["dma"][0]["bytes"] = 30  # w moves 30, the plan claims 20 for it
    verdict = verify(plan)
    # and 30 bytes do not fit the 20-byte buffer w holds
    assert verdict.traffic_bytes == 830 and {v.kind for v in verdict.violations} == {"traffic", "overfill"}
    plan["schedule"]["groups"][0]["dma"][0]["step"] = "0.7"
    with pytest.raises(PlanFormatError, match="names step '0.7', which its group does not have"):
        verify(plan)
