"""The planner choosing by time: groups compared by their roofline time on the target instead of
their DRAM traffic, and the plan saying where it groups otherwise than the least-traffic plan."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from loopwise.cli import app
from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor
from loopwise.memory.planner import plan
from loopwise.memory.timing import Rates, operator_work

M, K, N = 1024, 512, 512
RATES = Rates(dram_bytes_per_s=1e9, matrix_flops=1e10, vector_flops=1e9, capacity_bytes=64 * 1024)


def _product_then_add() -> Graph:
    """Y = X @ W (compute-bound at these rates), then Z = (Y + R) transposed (memory-bound; written
    transposed, it cannot run on each output tile of the product as its epilogue)."""
    mm = Operator("mm", {"m": M, "n": N, "k": K}, (Tensor("X", (M, K)), Tensor("W", (K, N)), Tensor("Y", (M, N))),
                  reads=(Access("X", ("m", "k")), Access("W", ("k", "n"))), writes=(Access("Y", ("m", "n")),),
                  macs=M * N * K)
    add = Operator("add", {"a": M, "b": N}, (Tensor("Y", (M, N)), Tensor("R", (N, M)), Tensor("Z", (N, M))),
                   reads=(Access("Y", ("a", "b")), Access("R", ("b", "a"))), writes=(Access("Z", ("b", "a")),))
    return Graph("product-then-add", (mm, add), frozenset({"W"}))


def _roofline_s(p, g: Graph) -> float:
    compute = {op.name: operator_work(op)[0] / (RATES.matrix_flops if operator_work(op)[1] == "matrix"
                                                else RATES.vector_flops) for op in g.operators}
    return sum(max(sum(compute[n] for n in grp.operators), grp.traffic_bytes / RATES.dram_bytes_per_s)
               for grp in p.groups)


def test_by_time_the_add_joins_the_product_whose_compute_hides_its_transfers():
    """Alone, the product tiles with the least traffic and the add moves Y, R and Z in a time of
    its own; together, the weights are streamed slab by slab (more bytes) but every transfer
    hides under the product's compute: less time, more traffic."""
    from loopwise.memory.verify import describe, verify

    g = _product_then_add()
    by_traffic = plan(g, RATES.capacity_bytes)
    by_time = plan(g, RATES.capacity_bytes, objective="time", rates=RATES)
    assert [grp.operators for grp in by_traffic.groups] == [("mm",), ("add",)]
    assert [grp.operators for grp in by_time.groups] == [("mm", "add")]
    assert by_time.total_bytes > by_traffic.total_bytes
    assert _roofline_s(by_time, g) < _roofline_s(by_traffic, g)
    verdict = verify({"total_bytes": by_time.total_bytes, "schedule": by_time.schedule})
    assert verdict.ok, "\n".join(describe(verdict))


def test_the_time_objective_needs_rates_and_an_objective_is_one_of_two():
    import pytest

    with pytest.raises(ValueError, match="rates"):
        plan(_product_then_add(), RATES.capacity_bytes, objective="time")
    with pytest.raises(ValueError, match="objective"):
        plan(_product_then_add(), RATES.capacity_bytes, objective="energy")


def test_plan_by_time_says_where_it_groups_otherwise(mlp_onnx, tmp_path):
    runs = str(tmp_path / "runs")
    result = CliRunner().invoke(app, ["memory", "plan", mlp_onnx, "--objective", "time", "--runs-dir", runs, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["objective"] == "time"
    choices = data["choices"]
    assert choices["objective"] == "time" and isinstance(choices["differ"], list)
    assert choices["least_traffic_bytes"] <= choices["plan_bytes"]
    bad = CliRunner().invoke(app, ["memory", "plan", mlp_onnx, "--objective", "energy", "--runs-dir", runs])
    assert bad.exit_code != 0 and "--objective energy: one of traffic, time" in str(bad.exception)
