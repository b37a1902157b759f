"""The verdict of the replay (:mod:`loopwise.memory.verify`): each violation with where it
happened, what each group moves and holds against what the plan claims, and its reading for a
person or a script."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Violation:
    """One thing the schedule does that a scratchpad cannot: ``where`` names the group, the slab
    (its iteration per loop) and the operator."""

    kind: str  # capacity, missing, incomplete, overfree, leftover, traffic, peak, output, overlap, range, offset,
    # overfill, key_blocks, freed, unloaded, unstored, layout, unfilled; against the model's graph
    # (verify_model, verify_reads, verify_ranges, verify_tiles): operators, inputs, order, short, binding,
    # elsewhere, tile_traffic, tile_fit
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
    address_peak_bytes: int = 0  # the highest offset + size of any buffer: the scratchpad the offsets use
    model_checks: str = "not made"  # "made", or "not made (why)": the checks against the model's graph

    @property
    def ok(self) -> bool:
        return not self.violations


def describe(verdict: Verdict, limit: int = 10) -> list[str]:
    """Lines for a person: the verdict, the recounted traffic against the claim, the first
    ``limit`` violations."""
    head = "PASS" if verdict.ok else f"FAIL ({len(verdict.violations)} violations)"
    lines = [f"{head}: traffic recounted {verdict.traffic_bytes} bytes, the plan claims "
             f"{verdict.claimed_traffic_bytes}; peak {verdict.peak_bytes} of {verdict.capacity_bytes} bytes, "
             f"buffers up to offset {verdict.address_peak_bytes}; checks against the model's graph "
             f"{verdict.model_checks}"]
    for v in verdict.violations[:limit]:
        lines.append(f"  {v.kind}: {v.where}: {v.message}")
    if len(verdict.violations) > limit:
        lines.append(f"  ... and {len(verdict.violations) - limit} more")
    return lines


def as_dict(verdict: Verdict) -> dict:
    """The verdict as JSON-ready data."""
    return {"ok": verdict.ok, "capacity_bytes": verdict.capacity_bytes, "traffic_bytes": verdict.traffic_bytes,
            "claimed_traffic_bytes": verdict.claimed_traffic_bytes, "peak_bytes": verdict.peak_bytes,
            "address_peak_bytes": verdict.address_peak_bytes, "model_checks": verdict.model_checks,
            "groups": [g.__dict__ for g in verdict.groups],
            "violations": [v.__dict__ for v in verdict.violations]}
