"""An independent check of a memory plan: replay its schedule step by step and slab by slab, keep
every scratchpad buffer with its bytes and its place, check the capacity and that no two buffers
alive together overlap at every step, and recount the DRAM traffic from the DMA transfers the
schedule lists.

This module reads only the plan's JSON (``loopwise memory plan --json`` or ``--out``); it shares no
code with the planner, nor with the allocator that chose the offsets, so a number the planner
claims is re-derived here from the schedule alone.

Schedule format (the plan's ``"schedule"`` key)::

    {"capacity_bytes": int,
     "outputs": [[tensor, bytes], ...],          # the model's outputs: each must be stored in full
     "groups": [{"operators": [name, ...], "traffic_bytes": int, "peak_bytes": int,
                 "steps": [STEP | LOOP, ...], "dma": [DMA, ...], "loop_nest": {...}}, ...]}

    STEP = {"id": str,                           # unique in the group: what a DMA transfer names
            "operator": name or null,            # null: a transfer with no operator (a prologue)
            "uses": [tensor, ...],               # what the operator touches: must be on chip
            "needs": [ENTRY, ...],               # optional: bytes of a tensor it reads that must be on chip
            "alloc": [ALLOC, ...],
            "free": [ENTRY or [tensor], ...]}    # [tensor] alone frees all of its bytes
    LOOP = {"loop": label, "extent": int, "size": int, "steps": [STEP | LOOP, ...]}
    ALLOC = [tensor, bytes, [label, ...], offset, size]   # a buffer at [offset, offset + size)
    DMA = {"step": id, "tensor": str, "bytes": int, "split": [label, ...], "offset": int,
           "from": "dram", "to": "scratchpad"}   # a load; a store goes from scratchpad to dram
    ENTRY = [tensor, bytes] or [tensor, bytes, [label, ...]]

A loop runs ``ceil(extent / size)`` times; iteration ``t`` covers units ``[t*size, min(extent,
(t+1)*size))`` of its dimension. An entry (or a transfer) with labels is split over those
enclosing loops: its ``bytes`` are the total over every iteration, and one iteration's share is cut
by units without remainder (``bytes*hi//extent - bytes*lo//extent``, applied loop by loop in the
order given), so the shares add up to the total exactly. One without labels moves its bytes at
every pass.

Replay rules, per step in order: allocations add to the tensor's on-chip bytes (a tensor's slab
parts accumulate in one buffer until freed: an allocation at the offset and size of a buffer the
tensor holds already adds to it, and must stay within its size); a new buffer must lie within
the capacity and overlap no buffer alive; then everything on chip must fit the capacity, and every
tensor the step uses, loads or stores must be on chip, and of every tensor it needs at least its
share (a consumer in a loop after its producer's reads what every slab of the producer made; one
inside that loop would read part of it); the step's DMA transfers are counted, each
at the offset of a buffer its tensor holds, and outside a tiled operator (whose transfers add up
every tile's) a load must fit in what its tensor holds on chip; frees subtract. A free with labels
frees the current iteration's part of its tensor: a later step that needs that part is rejected
(``freed``), and a buffer may be placed over parts so freed, part by part, even by the step that
reads them (:mod:`loopwise.memory.verify_parts`): then only by the operator's output (not a load,
nor another input), and only by an operator whose loop nest runs the slab in one tile, so that it
has read all of its slab before it writes any. A free of a whole tensor with no byte on chip is an
``overfree``. Data flow (:mod:`loopwise.memory.verify_flow`): what a step reads or stores must
hold data, loaded or written by an operator and not freed since (``unloaded``); a tensor an
operator wrote that is loaded back must have been stored before (``unstored``); a tensor freed in
parts cut another way than its parts were placed in leaves no room for another (``layout``). At
the end of the schedule nothing may be left on chip. A loop labelled ``"key"`` runs an attention
key block by key block with an online softmax; only a chain whose operators' kinds (the part of
each name before ``:``) are matmul, [mul or div], [add], softmax, matmul can, and the softmax's
running row maximum and sum (buffers ``rowmax:<softmax>`` and ``rowsum:<softmax>``) must be on
chip at every key block (``key_blocks`` otherwise: a layer norm's row cannot be rescaled block by
block). A step's ``needs`` shares, and every tensor its operator uses other than its output,
must be covered by bytes with data (loaded or written), not only by bytes allocated
(``unfilled``).

With the model's graph (``verify(plan, graph)``; ``loopwise memory verify`` imports the model the
plan names again), the schedule is also checked against the model: every operator runs once or
is folded into readers that run, what the schedule takes from DRAM is a model input or a weight,
each operator runs after what it reads, the graph's outputs are stored in full
(:mod:`loopwise.memory.verify_model`); each operator step holds, with data, the bytes its operator
reads of each tensor in that iteration, counted from the graph's access maps through the loop
nest's binding of loops to dimensions (``short``, ``binding``: :mod:`loopwise.memory.verify_reads`);
the part of a tensor each need names holds data (``elsewhere``:
:mod:`loopwise.memory.verify_ranges`); and a group run tile by tile loads and stores what its
listed tiling moves by the graph, each tile within its buffers (``tile_traffic``, ``tile_fit``:
:mod:`loopwise.memory.verify_tiles`). Without the graph the verdict says that those checks were
not made. Failures are values: every violation is reported with where it happened, never raised.
"""

from __future__ import annotations

import math
from dataclasses import replace

from loopwise.memory.verify_flow import Flow, written
from loopwise.memory.verify_group import (KEY_LOOP, PlanFormatError, Where, by_tiles, flat, load_plan, softmax_of,
                                          transfers_by_step)
from loopwise.memory.verify_model import model_violations, named_tensors
from loopwise.memory.verify_parts import Parts, cut, freed_in_place, overlap
from loopwise.memory.verify_ranges import Held
from loopwise.memory.verify_reads import Reads
from loopwise.memory.verify_repeat import plain_body, ranged_alike, signature
from loopwise.memory.verify_tiles import Tiles
from loopwise.memory.verify_verdict import GroupReplay, Verdict, Violation, as_dict, describe

__all__ = ["GroupReplay", "PlanFormatError", "Verdict", "Violation", "as_dict", "describe", "load_plan", "verify"]


def verify(plan: dict, graph=None, unchecked: str = "the model's graph was not given",
           skip_repeats: bool = True) -> Verdict:
    """Replay ``plan["schedule"]`` and compare what it does with what the plan claims; with the
    model's ``graph`` (:func:`loopwise.memory.verify_model.rebuild`), check the schedule against it
    too (:mod:`loopwise.memory.verify_model`, :mod:`loopwise.memory.verify_reads`); without it the
    verdict says those checks were not made and why (``unchecked``). ``skip_repeats``: an
    iteration of a loop that provably repeats one replayed before is counted, not replayed again
    (:mod:`loopwise.memory.verify_repeat`); False replays every iteration."""
    schedule = plan.get("schedule") if isinstance(plan, dict) else None
    if not isinstance(schedule, dict) or not isinstance(schedule.get("groups"), list):
        raise PlanFormatError("not a plan (no schedule with groups)")
    try:
        capacity = int(schedule["capacity_bytes"])
        replay = _Replay(capacity, graph, set(plan.get("operators_folded") or []) if graph is not None else set(),
                         skip_repeats)
        verdict = replay.run(plan, schedule)
        if graph is None:
            return replace(verdict, model_checks=f"not made ({unchecked})")
        extra = model_violations(plan, graph, replay.stored)
        left = replay.reads.unchecked()
        return replace(verdict, violations=verdict.violations + tuple(extra),
                       model_checks="made" + (f" (reads not counted from the graph for {left})" if left else ""))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, PlanFormatError):
            raise
        raise PlanFormatError(f"not a plan (malformed schedule: {exc.__class__.__name__}: {exc})") from None


class _Replay:
    def __init__(self, capacity: int, graph=None, folded: set[str] = frozenset(), skip_repeats: bool = True) -> None:
        self.capacity = capacity
        self.skip_repeats = skip_repeats  # iterations that repeat one exactly are not replayed again
        self.plain: dict[int, tuple | None] = {}
        self.reads = Reads(graph, folded) if graph is not None else None  # what operators read, by the graph
        # what a group run tile by tile moves and holds, by the graph (:mod:`loopwise.memory.verify_tiles`)
        self.tiles = Tiles(self.reads.compose) if graph is not None else None
        self.tile_held: dict[str, dict[str, int]] = {}  # per step of such a group: what is on chip
        # which bytes of each tensor hold data (:mod:`loopwise.memory.verify_ranges`), by the graph's sizes
        self.ranges = Held({t: graph.nbytes(t) for t in graph.tensors()}) if graph is not None else None
        self.live: dict[str, int] = {}
        self.held = 0  # the bytes of ``live`` together
        self.violations: list[Violation] = []
        self.moved = 0
        self.peak = 0
        self.peak_buffers = 0  # buffers on chip at the peak: each share may round by a byte or two
        self.stored: dict[str, int] = {}
        self.held_at: dict[str, int] = {}  # the current group's operators: the most on chip at their step
        self.buffers: dict[str, list[list[int]]] = {}  # per tensor: [offset, size, bytes held] per buffer
        self.address_peak = 0
        self.dma: dict[str, list[dict]] = {}  # the current group's transfers by step id
        self.tiled = False  # the current group is one operator run tile by tile
        self.by_tiles: set[str] = set()  # the current group's operators that run a slab tile by tile
        self.parts = Parts()  # what is freed slab by slab (:mod:`loopwise.memory.verify_parts`)
        self.flow = Flow()  # what holds data, and in what order (:mod:`loopwise.memory.verify_flow`)

    def run(self, plan: dict, schedule: dict) -> Verdict:
        self.named = named_tensors(schedule) if self.reads is not None else set()
        groups = []
        for gi, group in enumerate(schedule["groups"]):
            before, self.peak, self.peak_buffers, self.held_at = self.moved, 0, 0, {}
            self.dma = transfers_by_step(group)
            self.plain = {}  # per loop of the group (by id): its plain body (:mod:`verify_repeat`)
            self.flow.reported = set()
            self.tiled = (group.get("loop_nest") or {}).get("runs") == "tiled"
            self.by_tiles = by_tiles(group)
            if self.reads is not None:
                self.violations += self.reads.group(group, f"group {gi}")
            self.tile_held = {}
            self._steps(group["steps"], f"group {gi}", {}, [])
            if self.tiled and self.tiles is not None:
                self.violations += self.tiles.check(group, f"group {gi}", self.tile_held)
            replay = GroupReplay(len(group.get("operators", [])), self.moved - before, int(group["traffic_bytes"]),
                                 self.peak, int(group["peak_bytes"]), tuple(self.held_at.items()))
            self._compare_group(gi, replay)
            groups.append(replay)
        for t, nbytes in sorted(self.live.items()):
            if nbytes:
                self._violate("leftover", "end of plan", f"{t}: {nbytes} bytes still on chip after the last group")
        for t, nbytes in schedule.get("outputs", []):
            if self.stored.get(t, 0) < int(nbytes):
                self._violate("output", "end of plan", f"model output {t}: {self.stored.get(t, 0)} of its "
                                                       f"{int(nbytes)} bytes stored")
        claimed = int(plan.get("total_bytes", sum(g.claimed_traffic_bytes for g in groups)))
        if claimed != self.moved:
            self._violate("traffic", "whole plan", f"the schedule moves {self.moved} bytes, the plan claims {claimed}")
        return Verdict(self.capacity, self.moved, claimed, max((g.peak_bytes for g in groups), default=0),
                       tuple(groups), tuple(self.violations), self.address_peak)

    def _compare_group(self, gi: int, replay: GroupReplay) -> None:
        if replay.traffic_bytes != replay.claimed_traffic_bytes:
            self._violate("traffic", f"group {gi}", f"the schedule moves {replay.traffic_bytes} bytes, the plan "
                                                    f"claims {replay.claimed_traffic_bytes}")
        # a claimed peak may round each buffer's share down by a byte per loop it is split over
        if replay.peak_bytes > replay.claimed_peak_bytes + 2 * self.peak_buffers:
            self._violate("peak", f"group {gi}", f"the schedule holds {replay.peak_bytes} bytes at its peak, the plan "
                                                 f"claims {replay.claimed_peak_bytes}", replay.peak_bytes,
                          replay.claimed_peak_bytes)

    def _steps(self, steps: list, where: str, loops: dict[str, tuple[int, int, int, int]], path: list[int]) -> None:
        for step in steps:
            if "loop" in step:
                self._loop(step, where, loops, path)
            else:
                self._step(step, where, loops, path)

    def _loop(self, loop: dict, where: str, loops: dict, path: list[int]) -> None:
        extent, size = int(loop["extent"]), int(loop["size"])
        if extent < 1 or size < 1:
            raise PlanFormatError(f"not a plan (loop {loop['loop']!r} of extent {extent} by {size})")
        count = math.ceil(extent / size)
        state = self._key_loop_state(loop, where, path) if loop["loop"] == KEY_LOOP else ()
        plain = None
        if self.skip_repeats and count > 2:
            if id(loop) not in self.plain:
                body = plain_body(loop, self.dma)
                # where the replay knows the model, which bytes a step needs moves with the iteration:
                # only a body whose tensors cut by this loop are filled and needed alike may repeat
                ranged = ranged_alike(loop, self.dma, self.ranges.sizes) if self.ranges is not None else frozenset()
                self.plain[id(loop)] = None if body is None or ranged is None else (*body, ranged)
            plain = self.plain[id(loop)]
        # iterations that left the replay as they found it, by signature (:mod:`verify_repeat`): all
        # start from the state each of them ends in, as long as every iteration since did
        repeats, tries = {}, 3
        for t in range(count):
            inner = dict(loops, **{loop["loop"]: (t * size, min(extent, (t + 1) * size), extent, count)})
            sig = signature(plain[1], inner) if plain is not None and (repeats or tries) else None
            if sig is not None and self.reads is not None:  # the graph's reads differ at a loop's ends
                sig = (sig, tuple((lo == 0, hi == ext) for lo, hi, ext, _ in inner.values()))
            if sig in repeats:
                moved, added = repeats[sig]
                self.moved += moved
                for name, nbytes in added:
                    self.stored[name] = self.stored.get(name, 0) + nbytes
                continue
            watch = sig is not None and self.parts.untouched(plain[0]) and (
                self.ranges is None or not self.ranges.holds_any(plain[2]))
            if watch:
                before, moved, stored, found = self._state(), self.moved, dict(self.stored), len(self.violations)
            here = f"{where}, slab {'.'.join(str(x + 1) for x in path + [t])}, key block"
            for name in state:
                if self.live.get(name, 0) <= 0:
                    self._violate("key_blocks", here, f"{name}: the online softmax's state is not on chip")
            self._steps(loop["steps"], where, inner, path + [t])
            if watch:
                added = [(name, nbytes - stored.get(name, 0)) for name, nbytes in self.stored.items()
                         if nbytes != stored.get(name, 0)]
                if len(self.violations) == found and all(b >= 0 for _, b in added) and self._state() == before:
                    repeats[sig] = (self.moved - moved, added)
                    continue
            repeats = {}
            tries = max(tries - 1, 0)

    def _state(self) -> tuple:
        """Everything a step's replay reads besides the iteration, the traffic and the stores
        counted so far and what only grows with what it has seen (the peaks)."""
        buffers = tuple((t, tuple(map(tuple, bs))) for t, bs in self.buffers.items())
        ranges = self.ranges.state() if self.ranges is not None else ()
        return tuple(self.live.items()), self.held, buffers, self.flow.state(), self.parts.state(), ranges

    def _key_loop_state(self, loop: dict, where: str, path: list[int]) -> tuple[str, ...]:
        """The buffers of the running row maximum and sum of the softmax a loop over key blocks runs
        online, which must be on chip at every key block (none when its operators are no such chain)."""
        names = [s["operator"] for s in flat(loop["steps"]) if s.get("operator")]
        softmax = softmax_of(names)
        if softmax is None:
            here = f"{where}, slab {'.'.join(str(x + 1) for x in path) or '-'}"
            self._violate("key_blocks", here, f"a loop over key blocks runs {', '.join(names) or 'nothing'}: only "
                                              "matmul, [mul or div], [add], softmax, matmul can (an online softmax)")
            return ()
        return (f"rowmax:{softmax}", f"rowsum:{softmax}")

    def _share(self, entry: list, loops: dict) -> int:
        nbytes = int(entry[1])
        for label in (entry[2] if len(entry) > 2 else []):
            if label not in loops:
                raise PlanFormatError(f"not a plan ({entry[0]} is split over loop {label!r}, which does not enclose it)")
            lo, hi, extent, _ = loops[label]
            nbytes = nbytes * hi // extent - nbytes * lo // extent
        return nbytes

    def _step(self, step: dict, where: str, loops: dict, path: list[int]) -> None:
        here = Where(where, path, step.get("operator"))
        transfers = self.dma.get(step.get("id"), [])
        loaded = {d["tensor"] for d in transfers if d["to"] == "scratchpad"}
        output = written(step, loaded, self.flow.filled)
        for entry in step.get("free", []):
            if len(entry) > 1:
                self._track(entry)
        # only the operator's output may be written over them, and only by an operator that reads
        # all of its slab before it writes any of it (one tile per slab)
        dying = {} if step.get("operator") in self.by_tiles else freed_in_place(step, loops)
        self._cuts(step, "free", loops)
        for entry in step.get("alloc", []):
            nbytes = self._share(entry, loops)
            self.live[entry[0]] = self.live.get(entry[0], 0) + nbytes
            self.held += nbytes
            self._place(entry, nbytes, here, loops, dying if entry[0] in output else {})
            if self.ranges is not None:
                self.ranges.alloc(entry, loops)
        self._cuts(step, "alloc", loops)
        self._hold(step.get("operator"), here, step.get("id"))
        used = list(step.get("uses", [])) + [d["tensor"] for d in transfers]
        for t in dict.fromkeys(used):
            if self.live.get(t, 0) <= 0:
                self._violate("missing", here, f"{t} is used, loaded or stored with no buffer on chip")
        self._flow(step, transfers, output, here, loops)
        for entry in step.get("needs", []):
            nbytes, held_t = self._share(entry, loops), self.live.get(entry[0], 0)
            slack = 2 * len(entry[2] if len(entry) > 2 else [])
            if held_t > 0 and nbytes > held_t + slack:
                self._violate("incomplete", here, f"{entry[0]}: needs {nbytes} bytes on chip, holds {held_t}")
            elif held_t > 0 and nbytes > self.flow.bytes.get(entry[0], 0) + slack:
                self._unfilled(entry[0], nbytes, "needs", here)
            miss = self.ranges.missing(entry, loops) if self.ranges is not None else None
            if miss is not None:
                self._violate("elsewhere", here, f"{entry[0]}: needs bytes [{miss[0][0]}, {miss[0][1]}) of it, "
                                                 f"[{miss[1][0]}, {miss[1][1]}) hold no data of it on chip")
            dead = self.parts.needed_dead(entry[0], cut(int(entry[1]), entry[2] if len(entry) > 2 else [], loops))
            if dead is not None:
                self._violate("freed", here, f"{entry[0]}: needs bytes [{dead[0]}, {dead[1]}) of it, freed before")
        self._reads(step, output, loops, here)
        self._count(transfers, loops, here)
        for entry in step.get("free", []):
            self._free(entry, loops, here)

    def _hold(self, operator: str | None, here: Where, step_id: str | None = None) -> None:
        """What is on chip once a step's buffers are allocated: the peak, and the capacity."""
        held = self.held
        if self.tiled and self.tiles is not None:
            self.tile_held[step_id] = dict(self.live)
        if operator:
            self.held_at[operator] = max(held, self.held_at.get(operator, 0))
        if held > self.peak:
            self.peak, self.peak_buffers = held, len(self.live)
        if held > self.capacity:
            top = sorted(self.live.items(), key=lambda kv: -kv[1])[:3]
            self._violate("capacity", here, f"needs {held} bytes on chip, the capacity is {self.capacity} "
                                            f"(largest: {', '.join(f'{t} {b}' for t, b in top)})", held, self.capacity)

    def _count(self, transfers: list[dict], loops: dict, here: Where) -> None:
        """A step's DMA transfers: their bytes counted, each at the offset of a buffer its tensor
        holds, a load within what its tensor holds (outside a tiled operator)."""
        for d in transfers:
            nbytes = self._share([d["tensor"], d["bytes"], d.get("split", [])], loops)
            self.moved += nbytes
            if d["to"] == "dram":
                self.stored[d["tensor"]] = self.stored.get(d["tensor"], 0) + nbytes
            elif not self.tiled and nbytes > self.live.get(d["tensor"], 0) + 2 * len(d.get("split", [])):
                self._violate("overfill", here, f"a load of {nbytes} bytes of {d['tensor']}, which holds "
                                                f"{self.live.get(d['tensor'], 0)} bytes on chip")
            bases = [b[0] for b in self.buffers.get(d["tensor"], [])]
            if bases and d.get("offset") not in bases:
                self._violate("offset", here, f"the {'store' if d['to'] == 'dram' else 'load'} of {d['tensor']} "
                                              f"names offset {d.get('offset')}, its buffer is at "
                                              f"{', '.join(map(str, bases))}")

    def _flow(self, step: dict, transfers: list[dict], output: set[str], here: Where, loops: dict) -> None:
        """Data flow (:mod:`loopwise.memory.verify_flow`): loads first, then what the operator
        reads, then what it writes, then what the step stores."""
        for d in transfers:
            if d["to"] == "scratchpad":
                share = self._share([d["tensor"], d["bytes"], d.get("split", [])], loops)
                self._complain("unstored", here, self.flow.load(d["tensor"], self.stored.get(d["tensor"], 0), share,
                                                                self.live.get(d["tensor"], 0)))
                if self.ranges is not None:
                    self.ranges.load(d["tensor"], int(d["bytes"]), d.get("split", []), loops)
        for entry in step.get("needs", []):
            self._complain("unloaded", here, self.flow.read(entry[0], "read"))
        self.flow.write(output, self.live)
        if self.ranges is not None:
            for t in output:
                self.ranges.write(t)
        for d in transfers:
            if d["to"] == "dram":
                self._complain("unloaded", here, self.flow.read(d["tensor"], "stored"))

    def _reads(self, step: dict, output: set[str], loops: dict, here: Where) -> None:
        """What the step's operator reads must hold data: every tensor it uses other than its
        output in full, and, from the model's graph, the bytes its operator touches of each
        tensor in this iteration (:mod:`loopwise.memory.verify_reads`)."""
        if not step.get("operator"):
            return
        slack = 2 * len(loops)
        for t in dict.fromkeys(step.get("uses", [])):
            held = self.live.get(t, 0)
            if t not in output and held > 0 and self.flow.bytes.get(t, 0) + slack < held:
                self._unfilled(t, held, "uses", here)
        if self.reads is not None:
            self.violations += self.reads.short(step["operator"], output, loops, here, self.flow.bytes, self.named)

    def _unfilled(self, t: str, nbytes: int, how: str, here: Where) -> None:
        self._violate("unfilled", here, f"{t}: {how} {nbytes} bytes of it, {self.flow.bytes.get(t, 0)} on chip hold "
                                        "data (loaded or written)", nbytes, self.flow.bytes.get(t, 0))

    def _cuts(self, step: dict, key: str, loops: dict) -> None:
        """The order a tensor is made in where its parts are placed one by one (over parts freed), and
        frees that cut it another way (``key``: alloc or free)."""
        for entry in step.get(key, []):
            labels = entry[2] if len(entry) > 2 else []
            placed = key == "free" or (len(entry) > 3 and (entry[0], int(entry[3])) in self.parts.partwise)
            if labels and placed and all(label in loops for label in labels):
                self.flow.cut(entry[0], tuple(loops[label][2] for label in labels), key == "free")

    def _complain(self, kind: str, here: Where, message: str | None) -> None:
        if message is not None:
            self._violate(kind, here, message)

    def _place(self, entry: list, nbytes: int, here: Where, loops: dict, dying: dict) -> None:
        """The buffer an allocation fills: one the tensor holds at that offset and size (its parts
        accumulate), or a new one, which must lie within the capacity. What the allocation takes
        (a new buffer, or the new part of a buffer whose parts accumulate) must overlap nothing
        alive (:mod:`loopwise.memory.verify_parts`; ``dying``: parts the step frees in place)."""
        t = entry[0]
        if len(entry) < 5:
            self._violate("offset", here, f"{t}: an allocation with no scratchpad offset")
            return
        offset, size = int(entry[3]), int(entry[4])
        labels = entry[2] if len(entry) > 2 else []
        part = cut(int(entry[1]), labels, loops)
        accumulates = bool(labels) and size >= int(entry[1])
        mine = self.buffers.setdefault(t, [])
        same = next((b for b in mine if b[0] == offset and b[1] == size), None)
        fresh = same is None
        if fresh:
            if offset < 0 or offset + size > self.capacity:
                self._violate("range", here, f"{t}: buffer [{offset}, {offset + size}) lies outside the scratchpad "
                                             f"[0, {self.capacity})", offset + size, self.capacity)
            same = [offset, size, 0]
            mine.append(same)
            self.address_peak = max(self.address_peak, offset + size)
            whole = [(offset, offset + size)]
            if accumulates and self.parts.meets(self.buffers, same, whole, dying) == (True, False):
                self.parts.partwise.add((t, offset))  # placed over parts freed slab by slab
            else:
                self._overlaps(t, same, whole, here, dying)
        if self.parts.by_part(t, offset, fresh):
            self._overlaps(t, same, [(offset + part[0], offset + part[1])], here, dying)
        self.parts.allocated(t, part, offset if accumulates else None)
        same[2] += nbytes
        if same[2] > size:
            self._violate("offset", here, f"{t}: holds {same[2]} bytes in its buffer of {size} at offset {offset}")

    def _overlaps(self, t: str, buffer: list, claim: list, here: Where, dying: dict) -> None:
        """Reports where ``claim`` meets what a buffer alive occupies now, or the room of a tensor
        freed in parts that are not the bytes it was made in."""
        if not claim[0][1] > claim[0][0]:
            return
        for other in self.flow.scrambled:
            if any(b is not buffer and overlap(claim, [(b[0], b[0] + b[1])]) for b in self.buffers.get(other, [])):
                self._complain("layout", here, self.flow.placed_over(other))
        lo, hi = claim[0][0], claim[-1][1]
        for other, theirs in self.buffers.items():
            for b in theirs:
                if b is buffer or not b[1] or b[0] >= hi or b[0] + b[1] <= lo:
                    continue  # what a buffer occupies lies within its range
                hit = overlap(claim, self.parts.occupied(other, b, dying.get(other, [])))
                if hit is not None:
                    self._violate("overlap", here, f"{t} [{claim[0][0]}, {claim[0][1]}) overlaps {other} "
                                                   f"[{hit[0]}, {hit[1]}), alive at the same time")

    def _track(self, entry: list) -> None:
        """A tensor about to be freed part by part, held whole in one buffer: its parts are in it."""
        t, total = entry[0], int(entry[1])
        mine = self.buffers.get(t, [])
        if len(mine) == 1 and (t, mine[0][0]) not in self.parts.held and mine[0][2] == total <= mine[0][1]:
            self.parts.held[(t, mine[0][0])] = [(0, total)]

    def _free(self, entry: list, loops: dict, here: Where) -> None:
        t = entry[0]
        nbytes = self.live.get(t, 0) if len(entry) == 1 else self._share(entry, loops)
        if len(entry) == 1:
            self.parts.forget(t)
            if nbytes <= 0:
                self._violate("overfree", here, f"{t}: frees all of it, with no byte of it on chip")
        elif not self.parts.freed(t, cut(int(entry[1]), entry[2] if len(entry) > 2 else [], loops)):
            self._violate("overfree", here, f"{t}: frees a part of it freed before")
        if nbytes > self.live.get(t, 0):
            self._violate("overfree", here, f"{t}: frees {nbytes} bytes, {self.live.get(t, 0)} on chip")
            nbytes = self.live.get(t, 0)
        self.live[t] = self.live.get(t, 0) - nbytes
        self.held -= nbytes
        if self.ranges is not None:
            self.ranges.free(entry, loops, not self.live[t])
        if not self.live[t]:
            del self.live[t]
            self.buffers.pop(t, None)
            self.flow.gone(t)
            return
        self.flow.freed(t, self.live[t])
        left = nbytes  # a part freed: from the buffers filled last
        for b in reversed(self.buffers.get(t, [])):
            taken = min(left, b[2])
            b[2], left = b[2] - taken, left - taken
        self.buffers[t] = [b for b in self.buffers.get(t, []) if b[2] > 0]

    def _violate(self, kind: str, where: str | Where, message: str, needed: int = 0, capacity: int = 0) -> None:
        self.violations.append(Violation(kind, str(where), message, needed, capacity))
