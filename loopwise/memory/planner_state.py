"""What the planner found for one operator, as JSON data and back: the groups that start at it (per
end and way of meeting its neighbours: their traffic, and how each runs, so the few the plan
chooses can be evaluated again) and its best tiling alone. A plan run records these as the search
goes, so a stopped run continues where it was without searching an operator again."""

from __future__ import annotations

from dataclasses import dataclass

from loopwise.memory.key_blocks import key_blocked
from loopwise.memory.layerwise import TilingChoice
from loopwise.memory.plan_records import Group
from loopwise.memory.tiled_carry import kept_tiled

TILED = "tiled"  # how a group found is recorded when it is an operator alone, tiled (it keeps its output)
EPILOGUE = "epilogue"  # ... when it is a tiled operator and its epilogue (:mod:`loopwise.memory.epilogue`)


@dataclass(frozen=True)
class RecordedGroup:
    """A group found by an earlier search: what the grouping's dynamic program needs (its
    traffic) and what evaluates it again (its span, carries and slab dimensions)."""

    start: int
    end: int
    carry_in: int  # the boundary's carried set (``_Planner.carry_sets``; a bool recorded earlier counts as 0 or 1)
    carry_out: int
    traffic_bytes: int
    slab: list | str | None  # TILED, or [outer dimension per operator or None, inner dimension per
    # operator, extent, outer extent, key dimension per operator or None (recorded before key blocks: absent)]

    def rebuild(self, planner) -> Group:
        """The group itself, evaluated again by ``planner`` (the same graph and capacity)."""
        if self.slab == EPILOGUE:
            grp = planner.epilogue(self.start)
        elif self.slab == TILED:  # alone, tiled, its output kept on chip
            kept = kept_tiled(planner, self.start)
            grp = kept[1] if kept is not None and kept[0] == self.carry_out else None
        elif self.slab is not None and len(self.slab) > 4 and self.slab[4]:  # run in key blocks
            grp = key_blocked(planner, self.start, self.end)
        elif self.slab is None:
            grp = planner.evaluate(self.start, self.end, None, 1, carry_in=self.carry_in, carry_out=self.carry_out)
        else:
            outer, inner, extent, outer_extent = self.slab[:4]
            spec = list(zip(outer or [None] * len(inner), inner))
            grp = planner.evaluate(self.start, self.end, spec, extent, outer_extent, self.carry_in, self.carry_out)
        if grp is None or grp.traffic_bytes != self.traffic_bytes:
            raise RuntimeError(f"operators {self.start}..{self.end - 1}: the recorded group does not evaluate "
                               "again to the same traffic (a run resumed on another model or loopwise version?)")
        return grp


def _slab(grp: Group) -> list | str | None:
    s = grp.slab
    if s is None:
        return (EPILOGUE if len(grp.operators) > 1 else TILED) if grp.tiled else None
    return [list(s.outer_dims) if s.outer_dims else None, list(s.dims), s.extent, s.outer_extent,
            list(s.key_dims) if s.key_dims else None]


def operator_state(planner, i: int, found: dict) -> dict:
    """Operator ``i``'s search results (``found``: what ``candidates(i)`` returned) as JSON data."""
    choice, single = planner.choices.get(i), planner.singles[i]
    return {"found": [[j, cin, cout, int(grp.traffic_bytes), _slab(grp)] for (j, cin, cout), grp in found.items()],
            "single": [int(single.traffic_bytes), int(single.peak_bytes), single.tiled],
            "choice": None if choice is None else {"operator": choice.operator, "tiles": choice.tiles,
                                                   "order": list(choice.order), "traffic_bytes": choice.traffic_bytes,
                                                   "buffer_bytes": choice.buffer_bytes, "evaluated": choice.evaluated}}


def restore_operator(planner, i: int, state: dict) -> dict:
    """Puts operator ``i``'s recorded results back into ``planner``; returns its groups by end."""
    traffic, peak, tiled = state["single"]
    planner.singles[i] = Group((planner.ops[i].name,), traffic, peak, (), tiled=tiled, occupancy=(peak,),
                               per_operator=(traffic,))
    choice = state["choice"]
    if choice is not None:
        planner.choices[i] = TilingChoice(**{**choice, "order": tuple(choice["order"])})
        planner.evaluated += choice["evaluated"]
    return {(j, cin, cout): RecordedGroup(i, j, cin, cout, traffic, slab) for j, cin, cout, traffic, slab in state["found"]}
