"""An independent check of a memory plan: replay its schedule step by step and slab by slab, keep
every scratchpad buffer with its bytes, check the capacity at every step, and recount the DRAM
traffic from the loads and stores the schedule lists.

This module reads only the plan's JSON (``loopwise memory plan --json`` or ``--out``); it shares no
code with the planner, so a number the planner claims is re-derived here from the schedule alone.

Schedule format (the plan's ``"schedule"`` key)::

    {"capacity_bytes": int,
     "outputs": [[tensor, bytes], ...],          # the model's outputs: each must be stored in full
     "groups": [{"operators": [name, ...], "traffic_bytes": int, "peak_bytes": int,
                 "steps": [STEP | LOOP, ...]}, ...]}

    STEP = {"operator": name or null,            # null: a transfer with no operator (a prologue)
            "uses": [tensor, ...],               # what the operator touches: must be on chip
            "alloc": [ENTRY, ...], "load": [ENTRY, ...], "store": [ENTRY, ...],
            "free": [ENTRY or [tensor], ...]}    # [tensor] alone frees all of its bytes
    LOOP = {"loop": label, "extent": int, "size": int, "steps": [STEP | LOOP, ...]}
    ENTRY = [tensor, bytes] or [tensor, bytes, [label, ...]]

A loop runs ``ceil(extent / size)`` times; iteration ``t`` covers units ``[t*size, min(extent,
(t+1)*size))`` of its dimension. An entry with labels is split over those enclosing loops: its
``bytes`` are the total over every iteration, and one iteration's share is cut by units without
remainder (``bytes*hi//extent - bytes*lo//extent``, applied loop by loop in the order given), so
the shares add up to the total exactly. An entry without labels moves its bytes at every pass.

Replay rules, per step in order: allocations add to the tensor's on-chip bytes (a tensor's slab
parts accumulate in one buffer until freed); then everything on chip must fit the capacity, and
every tensor the step uses, loads or stores must be on chip; loads and stores are counted; frees
subtract. At the end of the schedule nothing may be left on chip. Failures are values: every
violation is reported with where it happened, never raised.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Violation:
    """One thing the schedule does that a scratchpad cannot: ``where`` names the group, the slab
    (its iteration per loop) and the operator."""

    kind: str  # capacity, missing, overfree, leftover, traffic, peak, output, format
    where: str
    message: str
    needed_bytes: int = 0
    capacity_bytes: int = 0


@dataclass(frozen=True)
class GroupReplay:
    operators: int
    traffic_bytes: int  # loads and stores recounted from the schedule
    claimed_traffic_bytes: int
    peak_bytes: int  # the most on chip at any step
    claimed_peak_bytes: int
    held_bytes: tuple[tuple[str, int], ...] = ()  # per operator, in order: the most on chip at its step


@dataclass(frozen=True)
class Verdict:
    """The replay of a whole plan: ``ok`` when no violation was found."""

    capacity_bytes: int
    traffic_bytes: int
    claimed_traffic_bytes: int
    peak_bytes: int
    groups: tuple[GroupReplay, ...]
    violations: tuple[Violation, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.violations


class PlanFormatError(ValueError):
    """The input is not a plan with a schedule this module can replay."""


def load_plan(path: Path) -> dict:
    """The plan's JSON from ``path``; :class:`PlanFormatError` (one line) when it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanFormatError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanFormatError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFormatError(f"{path}: not a plan (not JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("schedule"), dict):
        raise PlanFormatError(f"{path}: not a plan (no \"schedule\"; write one with loopwise memory plan --json)")
    return data


def verify(plan: dict) -> Verdict:
    """Replay ``plan["schedule"]`` and compare what it does with what the plan claims."""
    schedule = plan.get("schedule") if isinstance(plan, dict) else None
    if not isinstance(schedule, dict) or not isinstance(schedule.get("groups"), list):
        raise PlanFormatError("not a plan (no schedule with groups)")
    try:
        capacity = int(schedule["capacity_bytes"])
        return _Replay(capacity).run(plan, schedule)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, PlanFormatError):
            raise
        raise PlanFormatError(f"not a plan (malformed schedule: {exc.__class__.__name__}: {exc})") from None


class _Replay:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.live: dict[str, int] = {}
        self.violations: list[Violation] = []
        self.moved = 0
        self.peak = 0
        self.peak_buffers = 0  # buffers on chip at the peak: each share may round by a byte or two
        self.stored: dict[str, int] = {}
        self.held_at: dict[str, int] = {}  # the current group's operators: the most on chip at their step

    def run(self, plan: dict, schedule: dict) -> Verdict:
        groups = []
        for gi, group in enumerate(schedule["groups"]):
            before, self.peak, self.peak_buffers, self.held_at = self.moved, 0, 0, {}
            self._steps(group["steps"], f"group {gi}", {}, [])
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
                       tuple(groups), tuple(self.violations))

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
        for t in range(count):
            inner = dict(loops, **{loop["loop"]: (t * size, min(extent, (t + 1) * size), extent, count)})
            self._steps(loop["steps"], where, inner, path + [t])

    def _share(self, entry: list, loops: dict) -> int:
        nbytes = int(entry[1])
        for label in (entry[2] if len(entry) > 2 else []):
            if label not in loops:
                raise PlanFormatError(f"not a plan ({entry[0]} is split over loop {label!r}, which does not enclose it)")
            lo, hi, extent, _ = loops[label]
            nbytes = nbytes * hi // extent - nbytes * lo // extent
        return nbytes

    def _step(self, step: dict, where: str, loops: dict, path: list[int]) -> None:
        here = f"{where}, slab {'.'.join(str(t + 1) for t in path) or '-'}, " + (
            f"operator {step['operator']}" if step.get("operator") else "transfers")
        for entry in step.get("alloc", []):
            self.live[entry[0]] = self.live.get(entry[0], 0) + self._share(entry, loops)
        held = sum(self.live.values())
        if step.get("operator"):
            self.held_at[step["operator"]] = max(held, self.held_at.get(step["operator"], 0))
        if held > self.peak:
            self.peak, self.peak_buffers = held, len(self.live)
        if held > self.capacity:
            top = sorted(self.live.items(), key=lambda kv: -kv[1])[:3]
            self._violate("capacity", here, f"needs {held} bytes on chip, the capacity is {self.capacity} "
                                            f"(largest: {', '.join(f'{t} {b}' for t, b in top)})", held, self.capacity)
        used = list(step.get("uses", [])) + [e[0] for e in step.get("load", []) + step.get("store", [])]
        for t in dict.fromkeys(used):
            if self.live.get(t, 0) <= 0:
                self._violate("missing", here, f"{t} is used, loaded or stored with no buffer on chip")
        for entry in step.get("load", []):
            self.moved += self._share(entry, loops)
        for entry in step.get("store", []):
            nbytes = self._share(entry, loops)
            self.moved += nbytes
            self.stored[entry[0]] = self.stored.get(entry[0], 0) + nbytes
        for entry in step.get("free", []):
            self._free(entry, loops, here)

    def _free(self, entry: list, loops: dict, here: str) -> None:
        t = entry[0]
        nbytes = self.live.get(t, 0) if len(entry) == 1 else self._share(entry, loops)
        if nbytes > self.live.get(t, 0):
            self._violate("overfree", here, f"{t}: frees {nbytes} bytes, {self.live.get(t, 0)} on chip")
            nbytes = self.live.get(t, 0)
        self.live[t] = self.live.get(t, 0) - nbytes
        if not self.live[t]:
            del self.live[t]

    def _violate(self, kind: str, where: str, message: str, needed: int = 0, capacity: int = 0) -> None:
        self.violations.append(Violation(kind, where, message, needed, capacity))


def describe(verdict: Verdict, limit: int = 10) -> list[str]:
    """Lines for a person: the verdict, the recounted traffic against the claim, the first
    ``limit`` violations."""
    head = "PASS" if verdict.ok else f"FAIL ({len(verdict.violations)} violations)"
    lines = [f"{head}: traffic recounted {verdict.traffic_bytes} bytes, the plan claims "
             f"{verdict.claimed_traffic_bytes}; peak {verdict.peak_bytes} of {verdict.capacity_bytes} bytes"]
    for v in verdict.violations[:limit]:
        lines.append(f"  {v.kind}: {v.where}: {v.message}")
    if len(verdict.violations) > limit:
        lines.append(f"  ... and {len(verdict.violations) - limit} more")
    return lines


def as_dict(verdict: Verdict) -> dict:
    """The verdict as JSON-ready data."""
    return {"ok": verdict.ok, "capacity_bytes": verdict.capacity_bytes, "traffic_bytes": verdict.traffic_bytes,
            "claimed_traffic_bytes": verdict.claimed_traffic_bytes, "peak_bytes": verdict.peak_bytes,
            "groups": [g.__dict__ for g in verdict.groups],
            "violations": [v.__dict__ for v in verdict.violations]}
