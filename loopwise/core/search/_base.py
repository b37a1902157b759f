"""The one abstract base every search strategy implements: ask/tell over a tree it owns.

The search never evaluates anything. The driver asks which node to expand, proposes children of
it elsewhere, adds them (deduplicated by key) and tells each child's outcome. Every call that
changes the search is appended to an event list; ``state_dict`` is that list plus the config,
and ``from_state_dict`` rebuilds the search by replaying it, so a resumed run continues exactly
where the crashed one stopped (random generators included).
"""

from __future__ import annotations

import abc
import random
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, ClassVar

from loopwise.core.search._memory import SearchMemory
from loopwise.core.search._records import Expansion, Node, NodeState, Outcome
from loopwise.core.search._reward import RewardCalibrator
from loopwise.core.search._tree import Pruning, _Entry, _Tree

STATE_VERSION = 1


class Search(abc.ABC):
    """A tree search driven from outside through ``ask`` and ``tell``.

    Args:
        seed: seeds the strategy's own random generator (never the global one).
        max_evals: ``ask`` answers None once this many children were told (None: no budget).
        pruning: when nodes become dead ends; None uses the strategy's default.
        penalties: reward per failure status, overriding ``DEFAULT_PENALTIES``.
        repairs: how many repairs in a row a failed candidate may get (0: failures stay leaves).
            A failed node that may be repaired is asked for before any other node (``Expansion.
            repair``); its repair is its child, and counts against ``max_evals`` like any child.
    """

    DEFAULT_PRUNING: ClassVar[Pruning] = Pruning()
    _registry: ClassVar[dict[str, type[Search]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Search._registry[cls.__name__] = cls

    def __init__(self, *, seed: int = 0, max_evals: int | None = None,
                 pruning: Pruning | None = None,
                 penalties: Mapping[str, float] | None = None, repairs: int = 0) -> None:
        self.seed = seed
        self.repairs = repairs
        self.max_evals = max_evals
        self.pruning = pruning if pruning is not None else self.DEFAULT_PRUNING
        self._penalties = {str(k): float(v) for k, v in (penalties or {}).items()}
        self.calibrator = RewardCalibrator(self._penalties)
        self.memory = SearchMemory()
        self._rng = random.Random(seed)
        self._tree = _Tree(self.pruning)
        self._events: list[list[Any]] = []
        self._moves: dict[int, str] = {}  # node id -> the kind the memory counts it under
        self._n_evals = 0

    # -- the driver's side ------------------------------------------------------------------

    def add_root(self, state_key: str, payload: Any = None, value: float = 1.0) -> int:
        """Adds the baseline candidate as the root; it counts as evaluated and correct.

        Args:
            state_key: the baseline's stable key.
            payload: anything the driver wants back from ``Node.payload``.
            value: the baseline's speedup (1.0 unless speedups are measured against another).

        Returns:
            The root's id, 0.
        """
        if self._tree.entries:
            raise RuntimeError("the search already has a root")
        self._events.append(["root", state_key, payload, value])
        node_id, _ = self._tree.add(state_key, None, payload, "")
        self._record(self._tree.entries[node_id], Outcome("correct", value))
        return node_id

    def add_child(self, parent_id: int, key: str, payload: Any = None, *, note: str = "", move: str = "") -> int:
        """Adds a proposed child of ``parent_id``, unless a node with ``key`` already exists.

        Args:
            parent_id: the node that was expanded; it must have been evaluated as correct, or
                have failed and be offered for repair.
            key: the child candidate's stable key.
            payload: anything the driver wants back from ``Node.payload``.
            note: the proposal's note, kept with the node.
            move: the kind of change the search memory counts it under (a move name, the approach
                it was asked for); empty: the note is the kind (a proposer whose notes are move names).

        Returns:
            The new node's id, or the id of the existing node with ``key``.
        """
        parent = self._entry(parent_id)
        if parent.state not in (NodeState.OPEN, NodeState.CLOSED) and parent is not self._tree.repairable(self.repairs):
            raise ValueError(f"node {parent_id} is {parent.state.value}; only correct nodes "
                             "and failed nodes offered for repair have children")
        self._events.append(["child", parent_id, key, payload, note] + ([move] if move else []))
        node_id, created = self._tree.add(key, parent, payload, note)
        if created:
            self._moves[node_id] = move or note
        self.memory.record_proposal(move or note, duplicate=not created)
        if not created:
            self._tree.note_duplicate(parent)
        return node_id

    def tell(self, node_id: int, outcome: Outcome) -> None:
        """Records the evaluation of a pending node.

        Args:
            node_id: a node added by ``add_child`` and not told yet.
            outcome: how its evaluation ended.
        """
        entry = self._entry(node_id)
        if entry.state is not NodeState.PENDING:
            raise ValueError(f"node {node_id} was already told")
        self._events.append(["tell", node_id, outcome.to_dict()])
        self._record(entry, outcome)
        self._n_evals += 1
        parent_value = entry.parent.value if entry.parent is not None else None
        self.memory.record_outcome(self._moves.get(node_id, entry.note), outcome, parent_value)

    def ask(self) -> Expansion | None:
        """Returns the node to expand next, or None when the budget is spent or nothing is open."""
        if not self._tree.entries:
            raise RuntimeError("add_root before ask")
        node_id, repair = None, None
        if not self.budget_spent:
            repair = self._tree.repairable(self.repairs)
            if repair is not None:
                node_id = repair.id
            elif self._tree.entries[0].open_below > 0:
                node_id = self._select()
        self._events.append(["ask", node_id])
        if node_id is None:
            return None
        return Expansion(node_id, self._tree.entries[node_id].view(), repair=repair is not None)

    def close(self, node_id: int) -> None:
        """Closes a node for good, e.g. when the proposer has nothing more to offer for it (for a
        failed node: no repair)."""
        entry = self._entry(node_id)
        self._events.append(["close", node_id])
        entry.declined = True
        if entry.state is NodeState.OPEN:
            self._tree.set_state(entry, NodeState.CLOSED)

    # -- reading the tree -------------------------------------------------------------------

    def node(self, node_id: int) -> Node:
        """Returns a view of one node."""
        return self._entry(node_id).view()

    def nodes(self) -> list[Node]:
        """Returns views of all nodes, in id order."""
        return [entry.view() for entry in self._tree.entries]

    def find(self, key: str) -> int | None:
        """Returns the id of the node with ``key``, or None."""
        return self._tree.by_key.get(key)

    def best(self) -> Node | None:
        """Returns the correct node with the highest speedup (the earliest on ties)."""
        best: _Entry | None = None
        for entry in self._tree.entries:
            if entry.value is not None and (best is None or entry.value > best.value):
                best = entry
        return None if best is None else best.view()

    @property
    def n_evals(self) -> int:
        """Children told so far (the root's baseline is not counted)."""
        return self._n_evals

    @property
    def budget_spent(self) -> bool:
        """Whether ``max_evals`` children have been told."""
        return self.max_evals is not None and self._n_evals >= self.max_evals

    @property
    def budget_left(self) -> int | None:
        """Children that may still be told (None: no budget)."""
        return None if self.max_evals is None else max(0, self.max_evals - self._n_evals)

    def __len__(self) -> int:
        return len(self._tree.entries)

    # -- persistence ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Returns a JSON-safe snapshot (config and event list); payloads must be JSON-safe."""
        return {"version": STATE_VERSION, "strategy": type(self).__name__,
                "config": self._config(), "events": [list(e) for e in self._events]}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Search:
        """Rebuilds a search from ``state_dict()`` output by replaying its events.

        Called on ``Search`` itself, it picks the strategy the state names.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown search state version {state.get('version')!r}")
        strategy = Search._registry[state["strategy"]]
        if cls is not Search and not issubclass(strategy, cls):
            raise ValueError(f"state is for {state['strategy']}, not {cls.__name__}")
        config = dict(state["config"])
        config["pruning"] = Pruning(**config["pruning"])
        search = strategy(**config)
        for event in state["events"]:
            search._replay(event)
        return search

    def _replay(self, event: list[Any]) -> None:
        kind, args = event[0], event[1:]
        if kind == "root":
            self.add_root(*args)
        elif kind == "child":
            self.add_child(args[0], args[1], args[2], note=args[3], move=args[4] if len(args) > 4 else "")
        elif kind == "tell":
            self.tell(args[0], Outcome.from_dict(args[1]))
        elif kind == "close":
            self.close(args[0])
        elif kind == "ask":
            got = self.ask()
            if (None if got is None else got.node_id) != args[0]:
                raise ValueError(f"replay diverged: asked {got}, the log says {args[0]}")
        else:
            raise ValueError(f"unknown search event {kind!r}")

    # -- for strategies -----------------------------------------------------------------------

    @abc.abstractmethod
    def _select(self) -> int | None:
        """Returns the id of an OPEN node to expand; called only while one exists."""

    def _config(self) -> dict[str, Any]:
        """Returns the constructor arguments; strategies with more arguments extend it."""
        return {"seed": self.seed, "max_evals": self.max_evals, "pruning": asdict(self.pruning),
                "penalties": dict(self._penalties), "repairs": self.repairs}

    def _entry(self, node_id: int) -> _Entry:
        if not isinstance(node_id, int) or not 0 <= node_id < len(self._tree.entries):
            raise KeyError(f"no node {node_id!r}")
        return self._tree.entries[node_id]

    def _record(self, entry: _Entry, outcome: Outcome) -> None:
        if outcome.ok:
            self.calibrator.observe(outcome.value)
        penalty = 0.0 if outcome.ok else self.calibrator.penalty(outcome.status)
        self._tree.record(entry, outcome, penalty)

    def _mean_reward(self, entry: _Entry) -> float:
        """Mean calibrated reward over the subtree, against the calibration as it is now."""
        cal = self.calibrator
        z_sum = (entry.log_sum - entry.n_correct * cal.mean) / cal.std
        return (z_sum + entry.penalty_sum) / max(entry.visits, 1)
