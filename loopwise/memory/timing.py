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
        self.steps(((load_s, compute_s, store_s, prefetch),))

    def _drain(self) -> None:
        if self.pending is not None:
            seconds, ready = self.pending
            self.dma_free = max(self.dma_free, ready) + seconds
            self.pending = None

    def steps(self, calls, times: int = 1) -> None:
        """One step per ``(load_s, compute_s, store_s, prefetch)`` of ``calls``, in order, ``times``
        times over: a load starts when the DMA queue is free and, unless prefetched, when the compute
        before it has ended; a store queued by the step before goes once the load is done; the
        compute starts when its load and the compute before it are done."""
        dma_free, compute_end, compute_start = self.dma_free, self.compute_end, self.compute_start
        pending = self.pending
        overlapped, serialized = self.overlapped, self.serialized
        for load_s, compute_s, store_s, prefetch in calls * times:
            if load_s and compute_end > 0:  # a load with compute before it to overlap
                overlapped, serialized = overlapped + prefetch, serialized + (not prefetch)
            start = max(dma_free, compute_start if prefetch else compute_end)
            loaded = start + load_s
            dma_free = loaded
            if pending is not None:
                seconds, ready = pending
                dma_free = max(dma_free, ready) + seconds
                pending = None
            compute_start = max(loaded, compute_end)
            compute_end = compute_start + compute_s
            pending = (store_s, compute_end) if store_s else None
        self.dma_free, self.compute_end, self.compute_start = dma_free, compute_end, compute_start
        self.pending = pending
        self.overlapped, self.serialized = overlapped, serialized

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
    run = _Run(r, compute)
    for group in plan["schedule"]["groups"]:
        dma: dict[str, list[dict]] = {}
        for d in group.get("dma", []):
            dma.setdefault(d["step"], []).append(d)
        nest = group.get("loop_nest") or {}
        tiles = None
        if nest.get("runs") == "tiled":
            tiles = math.prod(loop["trips"] for loop in nest["operators"][0]["loops"])
        run.steps(_compiled(group["steps"], dma, compute, tiles), {}, 1)
    return _summary(plan, r, run.pipe, compute, run.moved, run.dram)


class _Step:
    """A step of the schedule with what the replay of its time reads, taken out of its JSON once."""

    __slots__ = ("alloc", "loads", "stores", "frees", "name", "compute_s", "tiles", "loaded")

    def __init__(self, step: dict, transfers: list[dict], compute: dict, tiles: int | None) -> None:
        self.alloc = [(a[0], int(a[1]), tuple(a[2]) if len(a) > 2 else ()) for a in step["alloc"]]
        self.loads = [(int(d["bytes"]), tuple(d.get("split", []))) for d in transfers if d["to"] == "scratchpad"]
        self.stores = [(int(d["bytes"]), tuple(d.get("split", []))) for d in transfers if d["to"] != "scratchpad"]
        self.frees = [(f[0], None, ()) if len(f) == 1 else (f[0], int(f[1]), tuple(f[2]) if len(f) > 2 else ())
                      for f in step["free"]]
        self.name = step.get("operator")
        self.compute_s = compute.get(self.name, 0.0)
        self.tiles = tiles
        loaded = {d["tensor"] for d in transfers if d["to"] == "scratchpad"}
        self.loaded = sum(int(a[-1]) for a in step["alloc"] if a[0] in loaded) if tiles is not None else 0


def _compiled(steps: list, dma: dict, compute: dict, tiles: int | None) -> list:
    """``steps`` as :class:`_Step` records and loops ``(label, extent, size, body, split)``; ``split``:
    for a loop with no loop inside, every entry of its body split over loops, ``(bytes, labels)``
    (what tells one iteration's shares from another's), else None."""
    out = []
    for step in steps:
        if "loop" in step:
            body = _compiled(step["steps"], dma, compute, tiles)
            split = None
            if not any(isinstance(s, tuple) for s in body):
                split = tuple((n, labels) for s in body for n, labels in (
                    *((n, lb) for _, n, lb in s.alloc), *s.loads, *s.stores,
                    *((n, lb) for _, n, lb in s.frees if n is not None)) if labels)
            out.append((step["loop"], int(step["extent"]), int(step["size"]), body, split))
        else:
            out.append(_Step(step, dma.get(step["id"], []), compute, tiles))
    return out


def _cut(nbytes: int, labels: tuple, at: dict) -> int:
    """:func:`~loopwise.memory.schedule_loops.share` with each iteration as ``(lo, hi, extent)``."""
    for label in labels:
        lo, hi, extent = at[label]
        nbytes = nbytes * hi // extent - nbytes * lo // extent
    return nbytes


class _Run:
    """The pipeline replayed over every executed step (the steps of a loop once per iteration), with
    the bytes on chip kept as a running total."""

    def __init__(self, r: Rates, compute: dict) -> None:
        self.r, self.pipe = r, _Pipeline()
        self.moved = {name: 0 for name in compute}
        self.live: dict[str, int] = {}
        self.held = self.held_before = self.dram = 0
        self.record: list | None = None  # the current iteration's steps, as :meth:`replay` makes them again

    def steps(self, steps: list, at: dict, fraction) -> None:
        for step in steps:
            if isinstance(step, tuple):
                self.loop(*step, at)
            else:
                self.step(step, at, fraction)

    def loop(self, label: str, extent: int, size: int, body: list, split, at: dict) -> None:
        """The iterations of a loop. Where the body has no loop inside, an iteration with the same
        shares and the same fraction of the compute as one run before, starting with the same bytes on
        chip as that one started and ended with, makes the same pipeline steps with the same figures:
        they are made again from what that one recorded (every float computed as it was then). An
        entry's share depends on the iteration only through its bytes once cut by this loop (the loops
        around it stay where they are), so those bytes tell the iterations apart."""
        outer = math.prod((hi - lo) / e for lo, hi, e in at.values()) if label not in at else None
        cuts = self._before(split, label, at) if split is not None else None
        seen: dict[tuple, tuple] = {}
        epoch = 0  # how many iterations so far changed the bytes on chip: a record holds in its own epoch
        batch, times = None, 0  # the record made again for the latest iterations, and how many
        for t in range(-(-extent // size)):
            lo, hi = t * size, min(extent, (t + 1) * size)
            # the iterations' shares multiplied outermost first, as math.prod takes them
            fraction = outer * ((hi - lo) / extent) if outer is not None else math.prod(
                (b - a) / e for a, b, e in {**at, label: (lo, hi, extent)}.values())
            if cuts is not None:
                key = (fraction, tuple(v * hi // extent - v * lo // extent for v in cuts[0]),
                       tuple(_cut(n, labels, {**at, label: (lo, hi, extent)}) for n, labels in cuts[1]))
                known = seen.get(key)
                if known is not None and known[0] == epoch:
                    if known is not batch:
                        self._flush(batch, times)
                        batch, times = known, 0
                    times += 1
                    continue
            self._flush(batch, times)
            batch, times = None, 0
            inner = {**at, label: (lo, hi, extent)}
            if cuts is None:
                self.steps(body, inner, fraction)
                continue
            state = (dict(self.live), self.held, self.held_before)
            self.record = []
            self.steps(body, inner, fraction)
            if (self.live, self.held, self.held_before) == state:
                seen[key] = (epoch, self._recorded(self.record))
            else:
                epoch += 1
            self.record = None
        self._flush(batch, times)

    def _flush(self, batch, times: int) -> None:
        if batch is not None and times:
            self.replay(batch[1], times)

    @staticmethod
    def _before(split, label: str, at: dict) -> tuple[tuple[int, ...], tuple] | None:
        """The distinct bytes of the entries of ``split`` before the loop ``label`` cuts them (each
        cut by it once, every other label a loop around it), and the entries cut otherwise (by it
        twice), whose shares are cut whole; None when an entry names a loop that is not there."""
        once, other = set(), []
        for n, labels in dict.fromkeys(split):
            if any(lb != label and lb not in at for lb in labels):
                return None
            if labels.count(label) == 1:
                once.add(_cut(n, labels[:labels.index(label)], at))
            else:
                other.append((n, labels))
        return tuple(sorted(once)), tuple(other)

    @staticmethod
    def _recorded(record: list) -> tuple:
        """An iteration's record as :meth:`replay` takes it: the bytes each operator moved, all the
        bytes moved, and the pipeline's calls in order (steps alone where no tiled step repeats)."""
        moved: dict[str, int] = {}
        for name, nbytes, _ in record:
            moved[name] = moved.get(name, 0) + nbytes
        calls = [call for _, _, cs in record for call in cs]
        return moved, sum(nbytes for _, nbytes, _ in record), calls, all(len(call) == 4 for call in calls)

    def replay(self, recorded: tuple, times: int) -> None:
        """A recorded iteration made again ``times`` times in a row."""
        moved, dram, calls, plain = recorded
        for name, nbytes in moved.items():
            if name in self.moved:
                self.moved[name] += nbytes * times
        self.dram += dram * times
        if plain:
            self.pipe.steps(calls, times)
            return
        for _ in range(times):
            for call in calls:
                self.pipe.step(*call) if len(call) == 4 else self.pipe.repeat(*call)

    def step(self, step: _Step, at: dict, fraction) -> None:
        r, live = self.r, self.live
        allocated = 0
        for tensor, nbytes, labels in step.alloc:
            if labels:
                nbytes = _cut(nbytes, labels, at)
            live[tensor] = live.get(tensor, 0) + nbytes
            allocated += nbytes
        loads = stores = 0
        for nbytes, labels in step.loads:
            loads += _cut(nbytes, labels, at) if labels else nbytes
        for nbytes, labels in step.stores:
            stores += _cut(nbytes, labels, at) if labels else nbytes
        seconds = step.compute_s * fraction
        if step.name in self.moved:
            self.moved[step.name] += loads + stores
        self.dram += loads + stores
        self.held += allocated
        held = self.held
        tiles = step.tiles
        if tiles is not None:
            calls = [(loads / tiles / r.dram_bytes_per_s, seconds / tiles, stores / tiles / r.dram_bytes_per_s,
                      self.held_before + allocated <= r.capacity_bytes)]
            if tiles > 1:
                calls.append((tiles - 1, loads / tiles / r.dram_bytes_per_s, seconds / tiles,
                              stores / tiles / r.dram_bytes_per_s, held + step.loaded <= r.capacity_bytes))
        else:
            calls = [(loads / r.dram_bytes_per_s, seconds, stores / r.dram_bytes_per_s,
                      self.held_before + allocated <= r.capacity_bytes)]
        for call in calls:
            self.pipe.step(*call) if len(call) == 4 else self.pipe.repeat(*call)
        if self.record is not None:
            self.record.append((step.name, loads + stores, calls))
        self.held_before = held
        for tensor, nbytes, labels in step.frees:
            if nbytes is None:
                self.held -= live.pop(tensor, 0)
            else:
                nbytes = _cut(nbytes, labels, at) if labels else nbytes
                live[tensor] = live.get(tensor, 0) - nbytes
                self.held -= nbytes


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
