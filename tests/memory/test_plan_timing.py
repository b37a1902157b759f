"""A plan's time on its target: a roofline per operator, a double-buffered pipeline for the plan
(a load overlaps the compute before it only when both fit), energy per byte where the target
gives it, and the two objectives compared."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from loopwise.cli import app
from loopwise.memory.plan_json import compare_objectives
from loopwise.memory.timing import Rates, plan_time


def _streamed() -> dict:
    """x (400 B) loaded in 4 slabs of 100 B through f (800 vector operations, 200 per slab)."""
    body = {"id": "0.0.0", "operator": "f", "uses": ["x"], "alloc": [["x", 400, ["slab"], 0, 100]], "free": [["x"]]}
    group = {"operators": ["f"], "traffic_bytes": 400, "peak_bytes": 100, "loop_nest": {"runs": "slabs"},
             "steps": [{"loop": "slab", "extent": 4, "size": 1, "steps": [body]}],
             "dma": [{"step": "0.0.0", "tensor": "x", "bytes": 400, "split": ["slab"], "from": "dram",
                      "to": "scratchpad", "offset": 0}]}
    return {"total_bytes": 400, "operators": [{"operator": "f", "flops": 800, "engine": "vector", "touched_bytes": 400}],
            "schedule": {"capacity_bytes": 1000, "outputs": [], "groups": [group]}}


def _rates(capacity: int, **energy) -> Rates:
    return Rates(dram_bytes_per_s=1e9, matrix_flops=1e10, vector_flops=1e9, capacity_bytes=capacity, **energy)


def test_a_load_overlaps_the_compute_before_it_when_both_slabs_fit():
    # each slab: load 0.1 us, compute 0.2 us; overlapped: the first load, then 4 computes back to back
    t = plan_time(_streamed(), _rates(1000))
    assert t["seconds"] == pytest.approx(0.9e-6)
    assert (t["loads_overlapped"], t["loads_serialized"]) == (3, 0)
    assert t["compute_seconds"] == pytest.approx(0.8e-6) and t["transfer_seconds"] == pytest.approx(0.4e-6)
    assert t["serial_seconds"] == pytest.approx(1.2e-6) and t["bound_seconds"] == pytest.approx(0.8e-6)
    [row] = t["operators"]
    assert row["roofline_seconds"] == pytest.approx(0.8e-6) and row["bound"] == "compute"


def test_a_load_waits_for_the_compute_before_it_when_two_slabs_do_not_fit():
    # 100 bytes held by the slab computing + 100 for the next one's load > 150: load, compute, load, ...
    t = plan_time(_streamed(), _rates(150))
    assert t["seconds"] == pytest.approx(1.2e-6)
    assert (t["loads_overlapped"], t["loads_serialized"]) == (0, 3)


def test_energy_is_counted_per_level_only_where_the_target_gives_it():
    assert plan_time(_streamed(), _rates(1000))["energy"] is None
    e = plan_time(_streamed(), _rates(1000, dram_pj_per_byte=10.0, scratchpad_pj_per_byte=1.0,
                                      energy_source="a test's own figures"))["energy"]
    # DRAM: 400 bytes at 10 pJ; scratchpad: the 400 bytes written there + f's 400 bytes read, at 1 pJ
    assert e["dram_joules"] == pytest.approx(4000e-12) and e["scratchpad_joules"] == pytest.approx(800e-12)
    assert e["joules"] == pytest.approx(4800e-12) and e["source"] == "a test's own figures"


def test_the_objectives_disagree_when_the_candidate_with_less_traffic_is_slower():
    plan = {"total_bytes": 100, "time": {"seconds": 2.0}}
    fast = {"total_bytes": 300, "time": {"seconds": 1.0}}
    o = compare_objectives(plan, fast)
    assert (o["traffic_optimal"], o["time_optimal"], o["agree"]) == ("planner", "layer-by-layer", False)
    assert compare_objectives(plan, {"total_bytes": 300, "time": {"seconds": 3.0}})["agree"] is True
    assert compare_objectives(plan, {"total_bytes": 300, "time": None}) is None


@pytest.fixture
def mlp(mlp_onnx):
    return mlp_onnx


def test_plan_reports_time_and_energy_from_the_target_file(mlp, tmp_path):
    target = tmp_path / "mine.yaml"
    target.write_text("name: mine\nscratchpad: {bytes: 1048576}\ndram: {bandwidth_gbs: 100}\n"
                      "compute: {matrix_tflops: 10, vector_tflops: 1, source: made up for a test}\n"
                      "energy: {dram_pj_per_byte: 20, scratchpad_pj_per_byte: 2, source: made up for a test}\n")
    runs = str(tmp_path / "runs")
    data = json.loads(CliRunner().invoke(app, ["memory", "plan", mlp, "--target", str(target), "--runs-dir", runs,
                                               "--json"]).output)
    t = data["time"]
    flops = {r["operator"]: (r["flops"], r["engine"]) for r in data["operators"]}
    assert sorted(flops.values()) == sorted([(2 * 64 * 256 * 256, "matrix"), (64 * 256, "vector"),
                                             (2 * 64 * 256 * 128, "matrix")])
    assert t["compute_seconds"] == pytest.approx((2 * 64 * 256 * 384) / 10e12 + 64 * 256 / 1e12)
    assert t["transfer_seconds"] == pytest.approx(data["total_bytes"] / 100e9)
    assert t["bound_seconds"] <= t["seconds"] <= t["serial_seconds"]
    assert t["energy"]["dram_joules"] == pytest.approx(data["total_bytes"] * 20e-12)
    assert data["objectives"]["traffic_optimal"] == "planner"
    text = CliRunner().invoke(app, ["memory", "plan", mlp, "--target", str(target), "--runs-dir", runs])
    assert "with double buffering" in text.output and "energy " in text.output and "mJ" in text.output
    assert "time and traffic agree" in text.output or "time and traffic disagree" in text.output
    plain = CliRunner().invoke(app, ["memory", "plan", mlp, "--runs-dir", runs])
    assert "energy: the target gives no energy per byte" in plain.output and "with double buffering" in plain.output


def test_the_html_report_shows_the_time_the_loop_nests_and_the_buffers_with_their_offsets(mlp, tmp_path):
    page_path = tmp_path / "plan.html"
    result = CliRunner().invoke(app, ["memory", "plan", mlp, "--runs-dir", str(tmp_path / "runs"), "--json",
                                      "--html", str(page_path)])
    assert result.exit_code == 0, result.output
    data, page = json.loads(result.output), page_path.read_text()
    assert "Time and energy on the target" in page and "not known for this target" in page
    assert f"{data['time']['seconds'] * 1e3:,.4f}" in page
    assert "Schedule: loop nests" in page and "Scratchpad buffers and DMA transfers" in page
    first = data["schedule"]["groups"][0]["dma"][0]
    assert f"DMA {first['from']} -&gt; {first['to']}" in page or f"DMA {first['from']} -> {first['to']}" in page
