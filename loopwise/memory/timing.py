"""A plan's time and energy on its target, from its schedule: a roofline per operator and a
double-buffered pipeline for the whole plan.

Per operator, the roofline time is the larger of its compute time (its FLOPs at the target's
matrix throughput when it has multiply-accumulates, two FLOPs each, else one operation per loop
iteration at the vector throughput) and its transfer time (the bytes its DMA transfers move, at
the DRAM bandwidth).

The plan's time replays the schedule as it runs (every slab, every tile) on two resources, one
DMA queue at the DRAM bandwidth and one compute engine. A step's loads run before its compute and
its stores after it. Double buffering: the loads of a step start while the step before computes
when both fit in the scratchpad at once (what the step before holds plus what this step
allocates); otherwise they wait for that compute to end. A step's stores are queued behind the
next step's loads. An operator run alone with a tiling is one step of the schedule that the
replay splits into its tiles (equal shares of its loads, compute and stores; the next tile's loads
overlap when the tile's buffers fit twice). A group in slabs repeats its steps per slab, each
operator doing its slab's share of the compute.

Energy, where the target gives energy per byte: DRAM bytes (every DMA transfer) at the DRAM's
figure, and scratchpad bytes at the scratchpad's: every DMA byte is written or read there once,
and each operator reads and writes each element of its tensors once (a floor: the compute engine
is taken to reuse operands it has read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loopwise.memory.schedule_loops import executed_steps, share


@dataclass(frozen=True)
class Rates:
    """What the target gives: bytes/s of DRAM, FLOP/s of each engine, picojoules per byte."""

    dram_bytes_per_s: float
    matrix_flops: float
    vector_flops: float
    capacity_bytes: int
    dram_pj_per_byte: float | None = None
    scratchpad_pj_per_byte: float | None = None
    energy_source: str | None = None


def rates(target) -> Rates | None:
    """The :class:`Rates` of a :class:`loopwise.memory.targets.Target`; None without compute figures."""
    if target.compute is None:
        return None
    energy = target.energy
    return Rates(target.dram.bandwidth_gbs * 1e9, target.compute.matrix_tflops * 1e12,
                 target.compute.vector_tflops * 1e12, target.scratchpad.bytes,
                 energy.dram_pj_per_byte if energy else None, energy.scratchpad_pj_per_byte if energy else None,
                 energy.source if energy else None)


def operator_work(op) -> tuple[int, str]:
    """(FLOPs, engine) of an operator: 2 per multiply-accumulate on the matrix engine, else one per
    loop iteration on the vector engine."""
    if op.macs:
        return 2 * int(op.macs), "matrix"
    return math.prod(op.dims.values()), "vector"


class _Pipeline:
    """One DMA queue and one compute engine, step by step."""

    def __init__(self) -> None:
        self.dma_free = self.compute_end = self.compute_start = 0.0
        self.pending: tuple[float, float] | None = None  # a store (seconds) queued when its compute ends
        self.overlapped = self.serialized = 0

    def step(self, load_s: float, compute_s: float, store_s: float, prefetch: bool) -> None:
        if load_s and self.compute_end > 0:  # a load with compute before it to overlap
            self.overlapped, self.serialized = self.overlapped + prefetch, self.serialized + (not prefetch)
        start = max(self.dma_free, self.compute_start if prefetch else self.compute_end)
        loaded = start + load_s
        self.dma_free = loaded
        self._drain()
        self.compute_start = max(loaded, self.compute_end)
        self.compute_end = self.compute_start + compute_s
        self.pending = (store_s, self.compute_end) if store_s else None

    def _drain(self) -> None:
        if self.pending is not None:
            seconds, ready = self.pending
            self.dma_free = max(self.dma_free, ready) + seconds
            self.pending = None

    def repeat(self, n: int, load_s: float, compute_s: float, store_s: float, prefetch: bool) -> None:
        """``n`` equal steps: a few simulated, the rest at the period they settle to."""
        run = min(n, 8)
        for _ in range(run - 1):
            self.step(load_s, compute_s, store_s, prefetch)
        before = self.compute_end
        self.step(load_s, compute_s, store_s, prefetch)
        period = self.compute_end - before
        if n > run:
            skip = (n - run) * period
            self.dma_free += skip
            self.compute_end += skip
            self.compute_start += skip
            if self.pending is not None:
                self.pending = (self.pending[0], self.pending[1] + skip)
            if load_s:
                self.overlapped += (n - run) * prefetch
                self.serialized += (n - run) * (not prefetch)

    def finish(self) -> float:
        self._drain()
        return max(self.compute_end, self.dma_free)


def plan_time(plan: dict, r: Rates) -> dict:
    """Time (and energy) of a plan's JSON (:func:`loopwise.memory.plan_json.plan_json`) at rates ``r``."""
    ops = {row["operator"]: row for row in plan["operators"]}
    compute = {name: row["flops"] / (r.matrix_flops if row["engine"] == "matrix" else r.vector_flops)
               for name, row in ops.items()}
    moved = {name: 0 for name in ops}
    pipe, live, held_before, dram = _Pipeline(), {}, 0, 0
    for group in plan["schedule"]["groups"]:
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
            fraction = math.prod(it.fraction for it in at.values())
            seconds = compute.get(name, 0.0) * fraction
            if name in moved:
                moved[name] += loads + stores
            dram += loads + stores
            held = sum(live.values())
            if nest.get("runs") == "tiled":
                tiles = math.prod(loop["trips"] for loop in nest["operators"][0]["loops"])
                loaded = sum(int(a[-1]) for a in step["alloc"] if any(d["tensor"] == a[0] and d["to"] == "scratchpad"
                                                                      for d in dma.get(step["id"], [])))
                pipe.step(loads / tiles / r.dram_bytes_per_s, seconds / tiles, stores / tiles / r.dram_bytes_per_s,
                          held_before + allocated <= r.capacity_bytes)
                if tiles > 1:
                    pipe.repeat(tiles - 1, loads / tiles / r.dram_bytes_per_s, seconds / tiles,
                                stores / tiles / r.dram_bytes_per_s, held + loaded <= r.capacity_bytes)
            else:
                pipe.step(loads / r.dram_bytes_per_s, seconds, stores / r.dram_bytes_per_s,
                          held_before + allocated <= r.capacity_bytes)
            held_before = held
            for f in step["free"]:
                if len(f) == 1:
                    live.pop(f[0], None)
                else:
                    live[f[0]] = live.get(f[0], 0) - share(int(f[1]), f[2] if len(f) > 2 else [], at)
    return _summary(plan, r, pipe, compute, moved, dram)


def _summary(plan: dict, r: Rates, pipe: _Pipeline, compute: dict, moved: dict, dram: int) -> dict:
    rows = []
    for name, seconds in compute.items():
        transfer = moved[name] / r.dram_bytes_per_s
        rows.append({"operator": name, "compute_seconds": seconds, "transfer_seconds": transfer,
                     "roofline_seconds": max(seconds, transfer), "bound": "compute" if seconds >= transfer else "memory"})
    total_compute, total_transfer = sum(compute.values()), dram / r.dram_bytes_per_s
    energy = None
    if r.dram_pj_per_byte is not None:
        touched = sum(row.get("touched_bytes", 0) for row in plan["operators"])
        dram_j = dram * r.dram_pj_per_byte * 1e-12
        scratch_j = (dram + touched) * r.scratchpad_pj_per_byte * 1e-12
        energy = {"joules": dram_j + scratch_j, "dram_joules": dram_j, "scratchpad_joules": scratch_j,
                  "dram_bytes": dram, "scratchpad_bytes": dram + touched, "source": r.energy_source}
    return {"seconds": pipe.finish(), "compute_seconds": total_compute, "transfer_seconds": total_transfer,
            "serial_seconds": total_compute + total_transfer, "bound_seconds": max(total_compute, total_transfer),
            "roofline_seconds": sum(row["roofline_seconds"] for row in rows),
            "loads_overlapped": pipe.overlapped, "loads_serialized": pipe.serialized,
            "energy": energy, "operators": rows}
