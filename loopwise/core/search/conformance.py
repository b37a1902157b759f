"""The tests every search strategy must pass. Needs pytest, so it is not imported by the package.

Use it by subclassing in a test module::

    class TestMySearch(SearchConformance):
        def make_search(self, seed, max_evals=None):
            return MySearch(seed=seed, max_evals=max_evals)
"""

from __future__ import annotations

import json
import random
import zlib

import pytest

from loopwise.core.records import Status
from loopwise.core.search._base import Search
from loopwise.core.search._records import NodeState, Outcome

_MOVES = tuple("abcdefgh")
_FAILURES = (Status.COMPILE_ERROR, Status.WRONG_OUTPUT, Status.TIMEOUT, Status.CRASH, Status.OOM)


def toy_outcome(key: str) -> Outcome:
    """A fixed outcome per key: a quarter fail, the rest get a key-dependent speedup."""
    h = zlib.crc32(key.encode())
    if h % 4 == 0:
        return Outcome(_FAILURES[(h // 4) % len(_FAILURES)])
    return Outcome(Status.CORRECT, 0.8 + (h % 1000) / 1000 * (1 + len(key) / 4))


def toy_proposals(key: str, rng: random.Random, n: int = 2) -> list[tuple[str, str]]:
    """Proposes ``n`` (child key, move) pairs; keys are move sets, so duplicates happen."""
    moves = set(key.split("+")) - {"root"}
    proposals = []
    for _ in range(n):
        move = rng.choice(_MOVES)
        proposals.append(("+".join(sorted(moves | {move})) or "root", move))
    return proposals


def drive(search: Search, steps: int, seed: int = 0, close_every: int = 0) -> list[tuple]:
    """Runs ``steps`` ask/add/tell rounds on the toy problem; returns the trace.

    The trace holds, per round, the asked id and the (child id, created) pairs, so two runs
    can be compared exactly. ``close_every`` > 0 closes every n-th asked node by hand.
    """
    rng = random.Random(seed)
    if not len(search):
        search.add_root("root", payload={"moves": []})
    trace = []
    for step in range(steps):
        ask = search.ask()
        if ask is None:
            trace.append((None,))
            break
        before = len(search)
        children = [search.add_child(ask.node_id, key, {"move": move}, note=move)
                    for key, move in toy_proposals(ask.node.key, rng)]
        for child in dict.fromkeys(children):
            if child >= before:
                search.tell(child, toy_outcome(search.node(child).key))
        if close_every and step % close_every == 0:
            search.close(ask.node_id)
        trace.append((ask.node_id, tuple(children)))
    return trace


class SearchConformance:
    """Behaviour shared by every ``Search``; subclass it and implement ``make_search``."""

    def make_search(self, seed: int, max_evals: int | None = None) -> Search:
        """Returns a new, empty search seeded with ``seed`` and budgeted to ``max_evals``."""
        raise NotImplementedError

    def test_ask_needs_a_root(self) -> None:
        with pytest.raises(RuntimeError):
            self.make_search(0).ask()

    def test_first_ask_expands_the_root(self) -> None:
        search = self.make_search(0)
        assert search.add_root("root", payload={"x": 1}) == 0
        ask = search.ask()
        assert ask is not None and ask.node_id == 0 and ask.node.payload == {"x": 1}
        assert ask.node.state is NodeState.OPEN and ask.node.value == 1.0

    def test_ask_always_names_an_open_node(self) -> None:
        search = self.make_search(1)
        search.add_root("root")
        rng = random.Random(1)
        for _ in range(40):
            ask = search.ask()
            assert ask is not None
            assert search.node(ask.node_id).state is NodeState.OPEN
            for key, move in toy_proposals(ask.node.key, rng):
                child = search.add_child(ask.node_id, key, note=move)
                if search.node(child).state is NodeState.PENDING:
                    search.tell(child, toy_outcome(key))

    def test_tell_contract(self) -> None:
        search = self.make_search(0)
        search.add_root("root")
        child = search.add_child(0, "a", note="a")
        assert search.node(child).state is NodeState.PENDING
        search.tell(child, Outcome("compile_error"))
        assert search.node(child).state is NodeState.FAILED
        assert search.n_evals == 1
        with pytest.raises(ValueError):
            search.tell(child, Outcome("correct", 2.0))
        with pytest.raises(ValueError):
            search.tell(0, Outcome("correct", 2.0))
        with pytest.raises(KeyError):
            search.tell(99, Outcome("correct", 2.0))
        with pytest.raises(ValueError):
            search.add_child(child, "b")

    def test_keys_deduplicate_across_the_tree(self) -> None:
        search = self.make_search(0)
        search.add_root("root")
        a = search.add_child(0, "a")
        search.tell(a, Outcome("correct", 1.5))
        assert search.add_child(0, "a") == a
        assert search.add_child(a, "a") == a
        assert search.add_child(a, "root") == 0
        b = search.add_child(a, "a+b")
        assert search.add_child(0, "a+b") == b
        assert len(search) == 3
        assert search.node(0).children == (a,) and search.node(a).children == (b,)

    def test_same_seed_same_run(self) -> None:
        first = drive(self.make_search(7), 60, seed=3)
        second = drive(self.make_search(7), 60, seed=3)
        assert first == second

    def test_closed_nodes_are_never_selected(self) -> None:
        search = self.make_search(2)
        search.add_root("root")
        rng = random.Random(2)
        closed: set[int] = set()
        for step in range(80):
            ask = search.ask()
            if ask is None:
                break
            assert ask.node_id not in closed
            for key, move in toy_proposals(ask.node.key, rng, n=3):
                child = search.add_child(ask.node_id, key, note=move)
                if search.node(child).state is NodeState.PENDING:
                    search.tell(child, toy_outcome(key))
            if step % 3 == 0:
                search.close(ask.node_id)
            closed |= {n.node_id for n in search.nodes() if n.state is NodeState.CLOSED}

    def test_state_dict_round_trip_continues_identically(self) -> None:
        search = self.make_search(5)
        drive(search, 30, seed=11)
        state = json.loads(json.dumps(search.state_dict()))
        restored = Search.from_state_dict(state)
        assert type(restored) is type(search)
        assert restored.nodes() == search.nodes()
        assert restored.memory == search.memory
        assert restored.state_dict() == search.state_dict()
        assert drive(restored, 30, seed=12) == drive(search, 30, seed=12)

    def test_budget_is_respected(self) -> None:
        search = self.make_search(0, max_evals=10)
        search.add_root("root")
        fresh = 0
        while (ask := search.ask()) is not None:
            assert fresh < 100, "ask never said the budget was spent"
            for _ in range(3):
                fresh += 1
                child = search.add_child(ask.node_id, f"fresh-{fresh}", note="fresh")
                search.tell(child, Outcome("correct", 1.0 + fresh / 100))
        assert search.budget_spent and 10 <= search.n_evals <= 12  # the last round may overshoot
        assert search.ask() is None

    def test_search_ends_when_every_node_is_closed(self) -> None:
        search = self.make_search(0)
        trace = drive(search, 500, close_every=1)
        assert trace[-1] == (None,)
        assert search.ask() is None
        assert not search.budget_spent

    def test_best_is_the_fastest_correct_node(self) -> None:
        search = self.make_search(4)
        drive(search, 30, seed=4)
        values = [n.value for n in search.nodes() if n.value is not None]
        assert search.best().value == max(values)
