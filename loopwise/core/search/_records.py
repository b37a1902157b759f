"""The frozen records a search hands out and takes in: outcomes, node views, expansions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from loopwise.core.records import Status


class NodeState(StrEnum):
    """Where a node stands in the search.

    ``PENDING``: added, not yet told. ``OPEN``: correct and may be expanded. ``CLOSED``: correct
    but pruned or closed by the driver, never expanded again (its children stay reachable).
    ``FAILED``: its evaluation failed; a leaf, unless the search offers it for one repair.
    """

    PENDING = "pending"
    OPEN = "open"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of evaluating one candidate.

    Attributes:
        status: how the evaluation ended (a ``Status`` or its string value).
        value: the speedup over the baseline (> 0) when ``status`` is ``correct``, else None.
    """

    status: Status
    value: float | None = None

    def __post_init__(self) -> None:
        status = Status(self.status)
        object.__setattr__(self, "status", status)
        if status is Status.CORRECT:
            if self.value is None or not math.isfinite(self.value) or self.value <= 0:
                raise ValueError(f"a correct outcome needs a speedup > 0, got {self.value!r}")
            object.__setattr__(self, "value", float(self.value))
        elif self.value is not None:
            raise ValueError(f"a {status.value} outcome has no speedup, got {self.value!r}")

    @property
    def ok(self) -> bool:
        """Whether the candidate was correct."""
        return self.status is Status.CORRECT

    def to_dict(self) -> dict[str, Any]:
        """Returns the outcome as a JSON-safe dict."""
        return {"status": self.status.value, "value": self.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        """Rebuilds an outcome written by ``to_dict``."""
        return cls(Status(data["status"]), data.get("value"))


@dataclass(frozen=True, slots=True)
class Node:
    """A read-only view of one node of the search tree, taken when it was asked for.

    Attributes:
        node_id: the node's id; the root is 0, ids count up in order of addition.
        key: the candidate's stable key; unique in the tree.
        parent_id: the parent's id, None for the root.
        depth: 0 for the root.
        payload: what the driver attached (a candidate, a config); opaque to the search.
        note: the proposal's note or move name, as given to ``add_child``.
        state: where the node stands.
        outcome: its evaluation, None while pending.
        children: ids of its children, in order of addition.
        visits: evaluated nodes in its subtree, itself included.
    """

    node_id: int
    key: str
    parent_id: int | None
    depth: int
    payload: Any
    note: str
    state: NodeState
    outcome: Outcome | None
    children: tuple[int, ...]
    visits: int

    @property
    def value(self) -> float | None:
        """The node's speedup, or None when it is pending or failed."""
        if self.outcome is None or not self.outcome.ok:
            return None
        return self.outcome.value


@dataclass(frozen=True, slots=True)
class Expansion:
    """What ``ask`` answers: expand this node (propose children of it).

    Attributes:
        node_id: the node to expand.
        node: a view of that node.
        repair: the node failed and is offered for repair: propose a fixed version of it.
    """

    node_id: int
    node: Node
    repair: bool = False
