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
    next group (its parts accumulate); w (20 B) kept for every slab. Then y is read and stored."""
    body = {"operator": "f", "uses": ["w", "x", "y"], "alloc": [["x", 400, ["slab"]], ["y", 400, ["slab"]]],
            "load": [["x", 400, ["slab"]]], "store": [], "free": [["x"]]}
    prologue = {"operator": None, "uses": [], "alloc": [["w", 20]], "load": [["w", 20]] if load_w else [],
                "store": [], "free": []}
    epilogue = {"operator": None, "uses": [], "alloc": [], "load": [], "store": [], "free": [["w"]]}
    first = {"operators": ["f"], "traffic_bytes": 420, "peak_bytes": 520,
             "steps": [prologue, {"loop": "slab", "extent": 8, "size": 2, "steps": [body]}, epilogue]}
    store = {"operator": "g", "uses": ["y", "z"], "alloc": [["z", 400]], "load": [], "store": [["z", 400]],
             "free": [["y"], ["z"]]}
    second = {"operators": ["g"], "traffic_bytes": 400, "peak_bytes": 800, "steps": [store]}
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
    second["store"] = []  # z never leaves
    second["uses"].append("q")  # q was never brought in
    plan["total_bytes"] = 420
    plan["schedule"]["groups"][1]["traffic_bytes"] = 0
    kinds = {v.kind for v in verify(plan).violations}
    assert kinds == {"leftover", "output", "missing"}


def test_a_split_over_a_loop_that_does_not_enclose_it_is_not_a_plan():
    plan = _tiny(capacity=1024)
    plan["schedule"]["groups"][1]["steps"][0]["alloc"] = [["z", 400, ["slab"]]]
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
