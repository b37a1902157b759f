"""What the planner found for one operator, as JSON data and back: the groups that start at it (per
end and way of meeting its neighbours) and its best tiling alone. A plan run records these as the
search goes, so a stopped run continues where it was without searching an operator again."""

from __future__ import annotations

from loopwise.memory.layerwise import TilingChoice
from loopwise.memory.plan_records import Group, Slab


def _plain(value):
    """JSON-ready: tuples as lists, numpy scalars as Python numbers."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value.item() if hasattr(value, "item") else value


def _group_data(grp: Group) -> dict:
    data = {k: _plain(getattr(grp, k)) for k in Group.__dataclass_fields__ if k != "slab"}
    data["slab"] = None if grp.slab is None else {k: _plain(getattr(grp.slab, k)) for k in Slab.__dataclass_fields__}
    return data


def _tuples(data: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}


def _group(data: dict) -> Group:
    slab = data["slab"]
    return Group(**{**_tuples(data), "slab": None if slab is None else Slab(**_tuples(slab))})


def operator_state(planner, i: int, found: dict) -> dict:
    """Operator ``i``'s search results (``found``: what ``candidates(i)`` returned) as JSON data."""
    choice = planner.choices.get(i)
    return {"found": [[j, cin, cout, _group_data(grp)] for (j, cin, cout), grp in found.items()],
            "single": _group_data(planner.singles[i]),
            "choice": None if choice is None else {"operator": choice.operator, "tiles": choice.tiles,
                                                   "order": list(choice.order), "traffic_bytes": choice.traffic_bytes,
                                                   "buffer_bytes": choice.buffer_bytes, "evaluated": choice.evaluated}}


def restore_operator(planner, i: int, state: dict) -> dict:
    """Puts operator ``i``'s recorded results back into ``planner``; returns its groups by end."""
    planner.singles[i] = _group(state["single"])
    choice = state["choice"]
    if choice is not None:
        planner.choices[i] = TilingChoice(**{**choice, "order": tuple(choice["order"])})
        planner.evaluated += choice["evaluated"]
    return {(j, cin, cout): _group(grp) for j, cin, cout, grp in state["found"]}
