"""Monte Carlo tree search with progressive widening, asymmetric branching and dead-end pruning.

Selection walks down from the root. At each node it either expands that node (when the node is
open and has fewer children than its widening budget) or descends into the child with the best
UCT score among children whose subtree still holds an open node. A node's widening budget is
``ceil(k * visits**alpha * m)``, where ``m`` is ``strong`` when the node beats its parent,
``weak`` otherwise (1 for the root): promising nodes get wider, weak ones narrower. A subtree
whose best speedup has not risen for more than ``Stagnation.patience`` evaluations loses score
in proportion to how long it has stagnated, so a deceptive trap cannot hold the budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from loopwise.core.search._base import Search
from loopwise.core.search._records import NodeState
from loopwise.core.search._tree import Pruning, _Entry


@dataclass(frozen=True, slots=True)
class Widening:
    """How many children a node may have: ``ceil(k * visits**alpha * multiplier)``.

    Attributes:
        k: children allowed at one visit.
        alpha: growth with visits; 0 fixes the width at ``k``, 1 grows it linearly.
        strong: multiplier for nodes that beat their parent (> 1 branches them wider).
        weak: multiplier for nodes that do not (< 1 branches them narrower).
    """

    k: float = 2.0
    alpha: float = 0.5
    strong: float = 1.5
    weak: float = 0.5

    def limit(self, visits: int, multiplier: float) -> int:
        """Returns the widening budget of a node with ``visits`` and ``multiplier``."""
        return max(1, math.ceil(self.k * max(visits, 1) ** self.alpha * multiplier))


@dataclass(frozen=True, slots=True)
class Stagnation:
    """How a subtree that stopped improving loses priority.

    A subtree's stagnation ``s`` is the evaluations (failures included) told inside it since its
    best speedup last rose. Once ``s`` exceeds ``patience``, UCT scores the subtree with
    ``Q - penalty * (s - patience) / patience``: a subtree that keeps failing to improve sinks
    steadily below its siblings, so a trap (one good move whose descendants never beat it) stops
    absorbing the budget and under-visited siblings get tried. An improvement resets ``s``.

    Attributes:
        patience: evaluations a subtree may go without improving before it is penalised.
        penalty: z units subtracted from Q per ``patience`` further stagnant evaluations;
            0 turns the rule off.
    """

    patience: int = 20
    penalty: float = 0.5

    def __post_init__(self) -> None:
        if self.patience < 1 or self.penalty < 0:
            raise ValueError(f"need patience >= 1 and penalty >= 0, got {self}")

    def decay(self, visits: int, best_at: int) -> float:
        """Returns the score penalty of a subtree with ``visits``, best found at ``best_at``."""
        excess = visits - best_at - self.patience
        return self.penalty * excess / self.patience if excess > 0 else 0.0


class MCTS(Search):
    """UCT tree search over calibrated log-speedup rewards.

    Args:
        seed: seeds the search's own random generator.
        max_evals: ``ask`` answers None once this many children were told.
        pruning: when nodes become dead ends; None for ``Pruning()``.
        penalties: reward per failure status, overriding ``DEFAULT_PENALTIES``.
        exploration: the UCT constant ``c`` in ``Q + c * sqrt(ln N_parent / N_child)``; Q is in
            z units (standard deviations of observed log speedups).
        greed: Q blends the subtree's mean reward (weight ``1 - greed``) with the z-score of its
            best speedup (weight ``greed``); 0 is textbook UCT.
        widening: the progressive-widening rule; None for ``Widening()``.
        stagnation: how subtrees that stopped improving are deprioritised; None for
            ``Stagnation()``.
        repairs: how many repairs in a row a failed candidate may get (see ``Search``).
    """

    def __init__(self, *, seed: int = 0, max_evals: int | None = None,
                 pruning: Pruning | None = None, penalties: Mapping[str, float] | None = None,
                 exploration: float = 0.7, greed: float = 0.5,
                 widening: Widening | Mapping[str, float] | None = None,
                 stagnation: Stagnation | Mapping[str, float] | None = None, repairs: int = 0) -> None:
        super().__init__(seed=seed, max_evals=max_evals, pruning=pruning, penalties=penalties,
                         repairs=repairs)
        if not 0.0 <= greed <= 1.0:
            raise ValueError(f"greed must be in [0, 1], got {greed}")
        self.exploration = exploration
        self.greed = greed
        if isinstance(widening, Mapping):
            widening = Widening(**widening)
        self.widening = widening if widening is not None else Widening()
        if isinstance(stagnation, Mapping):
            stagnation = Stagnation(**stagnation)
        self.stagnation = stagnation if stagnation is not None else Stagnation()

    def widening_limit(self, node_id: int) -> int:
        """Returns how many children the node may have now."""
        return self._limit(self._entry(node_id))

    def _limit(self, entry: _Entry) -> int:
        parent = entry.parent
        if parent is None:
            multiplier = 1.0
        elif entry.value is not None and entry.value > (parent.value or 0.0):
            multiplier = self.widening.strong
        else:
            multiplier = self.widening.weak
        return self.widening.limit(entry.visits, multiplier)

    def _select(self) -> int | None:
        entry = self._tree.entries[0]
        while True:
            if entry.state is NodeState.OPEN and len(entry.children) < self._limit(entry):
                return entry.id
            child = self._best_child(entry)
            if child is None:
                return entry.id if entry.state is NodeState.OPEN else None
            entry = child

    def _best_child(self, entry: _Entry) -> _Entry | None:
        log_n = math.log(max(entry.visits, 1))
        best, best_score = None, -math.inf
        for child in entry.children:
            if child.open_below == 0:
                continue
            score = (self._value(child) + self.exploration * math.sqrt(log_n / child.visits)
                     - self.stagnation.decay(child.visits, child.best_at))
            if score > best_score:
                best, best_score = child, score
        return best

    def _value(self, entry: _Entry) -> float:
        # Mean reward says how reliable a subtree is, its best speedup what it can reach; we
        # optimise for the best kernel, so the blend leans on the max as ``greed`` grows.
        mean = self._mean_reward(entry)
        if entry.n_correct == 0 or self.greed == 0.0:
            return mean
        best = self.calibrator.normalize(entry.max_log)
        return (1.0 - self.greed) * mean + self.greed * best

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "exploration": self.exploration,
                "greed": self.greed,
                "widening": asdict(self.widening), "stagnation": asdict(self.stagnation)}
