"""The loops of a schedule (:mod:`loopwise.memory.schedule`) as the planner's side reads them: the
iterations of a loop, an entry's share of one iteration, and the steps in program order, once
each (static) or once per iteration (executed).

The verifier (:mod:`loopwise.memory.verify`) has its own reading of the same rules and shares no
code with this module, so what the schedule's writers assume is checked by a second reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class At:
    """One iteration of one loop: units ``[lo, hi)`` of ``extent``, iteration ``index`` of ``trips``."""

    lo: int
    hi: int
    extent: int
    index: int
    trips: int

    @property
    def fraction(self) -> float:
        return (self.hi - self.lo) / self.extent


def trips(loop: dict) -> int:
    return math.ceil(int(loop["extent"]) / int(loop["size"]))


def iteration(loop: dict, t: int) -> At:
    extent, size = int(loop["extent"]), int(loop["size"])
    return At(t * size, min(extent, (t + 1) * size), extent, t, trips(loop))


def share(nbytes: int, labels, at: dict[str, At]) -> int:
    """Bytes of an entry split over the loops ``labels`` that one iteration moves or holds: cut
    by units without remainder, loop by loop in the order given, so the shares add up exactly."""
    for label in labels:
        it = at[label]
        nbytes = nbytes * it.hi // it.extent - nbytes * it.lo // it.extent
    return nbytes


def static_steps(steps: list, loops: tuple = ()) -> Iterator[tuple[dict, tuple[dict, ...]]]:
    """Every step once, in program order, with the loops that enclose it (outermost first)."""
    for step in steps:
        if "loop" in step:
            yield from static_steps(step["steps"], loops + (step,))
        else:
            yield step, loops


def executed_steps(steps: list, at: dict[str, At] | None = None) -> Iterator[tuple[dict, dict[str, At]]]:
    """Every step as it runs: once per iteration of the loops around it, with those iterations."""
    at = at or {}
    for step in steps:
        if "loop" in step:
            for t in range(trips(step)):
                yield from executed_steps(step["steps"], {**at, step["loop"]: iteration(step, t)})
        else:
            yield step, at
