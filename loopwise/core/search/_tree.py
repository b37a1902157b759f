"""The mutable tree behind every search: nodes, key dedup, subtree statistics, pruning counters.

Subtree statistics are kept as raw sums (visits, sum of log speedups, correct count, penalty sum)
so a strategy can score a subtree against the *current* reward calibration in O(1), instead of
freezing rewards that were normalised against an early, narrow distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from loopwise.core.search._records import Node, NodeState, Outcome


@dataclass(frozen=True, slots=True)
class Pruning:
    """When a node becomes a dead end and is closed.

    Attributes:
        max_failed: close a node after this many of its children failed (None: never).
        max_stale: close a node after this many consecutive children that did not beat it;
            failed children and duplicate proposals count as not beating it (None: never).
    """

    max_failed: int | None = 6
    max_stale: int | None = 10


class _Entry:
    __slots__ = ("id", "key", "parent", "depth", "payload", "note", "outcome", "state",
                 "children", "visits", "log_sum", "n_correct", "penalty_sum", "failed_children",
                 "stale", "open_below", "max_log", "best_at", "repair_depth", "declined")

    def __init__(self, node_id: int, key: str, parent: _Entry | None, payload: Any,
                 note: str) -> None:
        self.id = node_id
        self.key = key
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.payload = payload
        self.note = note
        self.outcome: Outcome | None = None
        self.state = NodeState.PENDING
        self.children: list[_Entry] = []
        self.visits = 0
        self.log_sum = 0.0
        self.n_correct = 0
        self.penalty_sum = 0.0
        self.failed_children = 0
        self.stale = 0
        self.open_below = 0  # open nodes in the subtree, itself included
        self.max_log = -math.inf  # best log speedup in the subtree
        self.best_at = 0  # subtree visits when max_log last rose; visits - best_at = stagnation
        # repairs in a row that led here: a child of a failed node is a repair of it
        failed_parent = parent is not None and parent.state is NodeState.FAILED
        self.repair_depth = parent.repair_depth + 1 if failed_parent else 0
        self.declined = False  # the driver closed it: no repair will be asked for

    @property
    def value(self) -> float | None:
        if self.outcome is None or not self.outcome.ok:
            return None
        return self.outcome.value

    def view(self) -> Node:
        return Node(self.id, self.key, None if self.parent is None else self.parent.id,
                    self.depth, self.payload, self.note, self.state, self.outcome,
                    tuple(c.id for c in self.children), self.visits)


class _Tree:
    def __init__(self, pruning: Pruning) -> None:
        self.pruning = pruning
        self.entries: list[_Entry] = []
        self.by_key: dict[str, int] = {}

    def add(self, key: str, parent: _Entry | None, payload: Any, note: str) -> tuple[int, bool]:
        """Adds a node; returns (id, True), or (existing id, False) when the key is known."""
        if key in self.by_key:
            return self.by_key[key], False
        entry = _Entry(len(self.entries), key, parent, payload, note)
        self.entries.append(entry)
        self.by_key[key] = entry.id
        if parent is not None:
            parent.children.append(entry)
        return entry.id, True

    def record(self, entry: _Entry, outcome: Outcome, penalty: float) -> None:
        """Stores an outcome, updates subtree sums on the path to the root, prunes the parent."""
        entry.outcome = outcome
        log_speedup = math.log(outcome.value) if outcome.ok else 0.0
        node: _Entry | None = entry
        while node is not None:
            node.visits += 1
            if outcome.ok:
                node.log_sum += log_speedup
                node.n_correct += 1
                if log_speedup > node.max_log:
                    node.max_log, node.best_at = log_speedup, node.visits
            else:
                node.penalty_sum += penalty
            node = node.parent
        self.set_state(entry, NodeState.OPEN if outcome.ok else NodeState.FAILED)
        parent = entry.parent
        if parent is None:
            return
        parent.failed_children += not outcome.ok
        improved = outcome.ok and outcome.value > (parent.value or 0.0)
        parent.stale = 0 if improved else parent.stale + 1
        self.prune(parent)

    def note_duplicate(self, parent: _Entry) -> None:
        parent.stale += 1
        self.prune(parent)

    def prune(self, entry: _Entry) -> None:
        limits = self.pruning
        if entry.state is not NodeState.OPEN:
            return
        if (limits.max_failed is not None and entry.failed_children >= limits.max_failed) or (
            limits.max_stale is not None and entry.stale >= limits.max_stale
        ):
            self.set_state(entry, NodeState.CLOSED)

    def set_state(self, entry: _Entry, state: NodeState) -> None:
        delta = (state is NodeState.OPEN) - (entry.state is NodeState.OPEN)
        entry.state = state
        node: _Entry | None = entry
        while delta and node is not None:
            node.open_below += delta
            node = node.parent

    def repairable(self, limit: int) -> _Entry | None:
        """The earliest failed node that may still be repaired: no child yet, not declined, and
        fewer than ``limit`` repairs in a row behind it."""
        if limit <= 0:
            return None
        for entry in self.entries:
            if (entry.state is NodeState.FAILED and not entry.children and not entry.declined
                    and entry.repair_depth < limit):
                return entry
        return None

    def open_entries(self) -> list[_Entry]:
        return [e for e in self.entries if e.state is NodeState.OPEN]
