"""A plan's time (:func:`loopwise.memory.timing.plan_time`), which replays each step's JSON read
once and the bytes on chip as a running total, equals the same pipeline driven step by step from
the schedule's JSON (every share recut, every iteration made, the bytes on chip summed at every
step), float for float."""

from __future__ import annotations

import functools
import math

import pytest

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise
from loopwise.memory.planner import plan_with_baseline
from loopwise.memory.schedule_loops import executed_steps, share
from loopwise.memory.timing import Rates, _Pipeline, _summary, operator_work, plan_time


def _step_by_step(plan_data: dict, r: Rates) -> dict:
    """The pipeline over ``executed_steps``, every number taken from the JSON at every step."""
    ops = {row["operator"]: row for row in plan_data["operators"]}
    compute = {name: row["flops"] / (r.matrix_flops if row["engine"] == "matrix" else r.vector_flops)
               for name, row in ops.items()}
    moved = {name: 0 for name in ops}
    pipe, live, held_before, dram = _Pipeline(), {}, 0, 0
    for group in plan_data["schedule"]["groups"]:
        dma: dict[str, list[dict]] = {}
        for d in group.get("dma", []):
            dma.setdefault(d["step"], []).append(d)
        nest = group.get("loop_nest") or {}
        for step, at in executed_steps(group["steps"]):
            allocated = 0
            for a in step["alloc"]:
                nbytes = share(int(a[1]), a[2] if len(a) > 2 else [], at)
                live[a[0]] = live.get(a[0], 0) + nbytes
                allocated += nbytes
            loads = stores = 0
            for d in dma.get(step["id"], []):
                nbytes = share(int(d["bytes"]), d.get("split", []), at)
                loads, stores = (loads + nbytes, stores) if d["to"] == "scratchpad" else (loads, stores + nbytes)
            name = step.get("operator")
            seconds = compute.get(name, 0.0) * math.prod(it.fraction for it in at.values())
            if name in moved:
                moved[name] += loads + stores
            dram += loads + stores
            held = sum(live.values())
            bw = r.dram_bytes_per_s
            if nest.get("runs") == "tiled":
                tiles = math.prod(loop["trips"] for loop in nest["operators"][0]["loops"])
                loaded = sum(int(a[-1]) for a in step["alloc"] if any(d["tensor"] == a[0] and d["to"] == "scratchpad"
                                                                      for d in dma.get(step["id"], [])))
                pipe.step(loads / tiles / bw, seconds / tiles, stores / tiles / bw,
                          held_before + allocated <= r.capacity_bytes)
                if tiles > 1:
                    pipe.repeat(tiles - 1, loads / tiles / bw, seconds / tiles, stores / tiles / bw,
                                held + loaded <= r.capacity_bytes)
            else:
                pipe.step(loads / bw, seconds, stores / bw, held_before + allocated <= r.capacity_bytes)
            held_before = held
            for f in step["free"]:
                if len(f) == 1:
                    live.pop(f[0], None)
                else:
                    live[f[0]] = live.get(f[0], 0) - share(int(f[1]), f[2] if len(f) > 2 else [], at)
    return _summary(plan_data, r, pipe, compute, moved, dram)


def _projection(name, x, w, out, m, n, k):
    return Operator(name, {"m": m, "n": n, "k": k}, (Tensor(x, (m, k)), Tensor(w, (n, k)), Tensor(out, (m, n))),
                    reads=(Access(x, ("m", "k")), Access(w, ("n", "k"))), writes=(Access(out, ("m", "n")),),
                    macs=m * n * k)


def _gate_up(m, n, k) -> Graph:
    return Graph("gate-up", (_projection("gate", "x", "wg", "g", m, n, k), _projection("up", "x", "wu", "u", m, n, k),
                             elementwise("mul", (m, n), ("g", "u"), "y")), frozenset({"wg", "wu"}))


def _as_json(g: Graph, capacity: int, baseline: bool) -> dict:
    p = plan_with_baseline(g, capacity)[baseline]
    rows = []
    for grp in p.groups:
        for name in grp.operators:
            flops, engine = operator_work(next(op for op in g.operators if op.name == name))
            rows.append({"operator": name, "flops": flops, "engine": engine, "touched_bytes": 0})
    return {"total_bytes": p.total_bytes, "operators": rows, "schedule": p.schedule}


CASES = [(_gate_up(160, 60, 32), 4 * 1024)]


@functools.lru_cache(maxsize=None)
def _planned(case: int, baseline: bool) -> dict:
    """The plan of a case, or its layer-by-layer baseline (every operator tiled alone)."""
    return _as_json(*CASES[case], baseline)


def test_the_cases_run_in_nested_slabs_and_tiled():
    runs = {(grp["loop_nest"]["runs"], len(grp["loop_nest"]["loops"]))
            for case in range(len(CASES)) for base in (False, True) for grp in _planned(case, base)["schedule"]["groups"]}
    assert ("slabs", 2) in runs and ("tiled", 0) in runs


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("baseline", [False, True])
@pytest.mark.parametrize("capacity_scale", [1.0, 0.25])
def test_plan_time_equals_the_step_by_step_replay(case, baseline, capacity_scale):
    data = _planned(case, baseline)
    r = Rates(dram_bytes_per_s=3e9, matrix_flops=7e11, vector_flops=1.3e10,
              capacity_bytes=int(CASES[case][1] * capacity_scale), dram_pj_per_byte=7.0, scratchpad_pj_per_byte=0.5)
    assert plan_time(data, r) == _step_by_step(data, r)
