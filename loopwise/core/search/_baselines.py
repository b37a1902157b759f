"""Baseline strategies on the same ask/tell interface: greedy, beam, random, best-of-N."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from loopwise.core.search._base import Search
from loopwise.core.search._records import NodeState
from loopwise.core.search._tree import Pruning, _Entry


def _rank(entry: _Entry) -> tuple[float, int]:
    # Higher speedup first, then the earlier node: deterministic without drawing randomness.
    return (-(entry.value or 0.0), entry.id)


class Greedy(Search):
    """Best-first: always expands the best open node found so far."""

    def _select(self) -> int | None:
        return min(self._tree.open_entries(), key=_rank).id


class RandomSearch(Search):
    """Expands an open node drawn uniformly at random."""

    def _select(self) -> int | None:
        return self._rng.choice(self._tree.open_entries()).id


class BestOfN(Search):
    """Always expands the root: N independent proposals from the baseline.

    Pruning is off by default, so the root stays open until the budget is spent or the driver
    closes it.
    """

    DEFAULT_PRUNING: ClassVar[Pruning] = Pruning(max_failed=None, max_stale=None)

    def _select(self) -> int | None:
        root = self._tree.entries[0]
        return root.id if root.state is NodeState.OPEN else None


class Beam(Search):
    """Beam search: expands each of the ``width`` best nodes of a generation once, in turn.

    The next generation is the ``width`` best open nodes added during the current one; when
    that generation produced no open node, it restarts from the best open nodes overall.

    Args:
        width: nodes kept per generation.
        seed, max_evals, pruning, penalties: as for ``Search``.
    """

    def __init__(self, width: int = 4, *, seed: int = 0, max_evals: int | None = None,
                 pruning: Pruning | None = None,
                 penalties: Mapping[str, float] | None = None, repairs: int = 0) -> None:
        super().__init__(seed=seed, max_evals=max_evals, pruning=pruning, penalties=penalties,
                         repairs=repairs)
        if width < 1:
            raise ValueError(f"beam width must be >= 1, got {width}")
        self.width = width
        self._queue: list[int] = []
        self._generation_start = 0

    def _select(self) -> int | None:
        entries = self._tree.entries
        while True:
            while self._queue:
                node_id = self._queue.pop(0)
                if entries[node_id].state is NodeState.OPEN:
                    return node_id
            self._next_generation()

    def _next_generation(self) -> None:
        entries = self._tree.entries
        fresh = [e for e in entries[self._generation_start:] if e.state is NodeState.OPEN]
        pool = fresh or self._tree.open_entries()
        self._queue = [e.id for e in sorted(pool, key=_rank)[: self.width]]
        self._generation_start = len(entries)

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "width": self.width}
