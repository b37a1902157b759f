"""Tree search: conformance of every strategy, the MCTS mechanics, and synthetic landscapes."""

from __future__ import annotations

import json
import math
import random
import statistics
import zlib

import pytest

from loopwise.core.search import (
    DEFAULT_PENALTIES,
    MCTS,
    REWARD_CLIP,
    Beam,
    BestOfN,
    Greedy,
    NodeState,
    Outcome,
    Pruning,
    RandomSearch,
    RewardCalibrator,
    Search,
    SearchMemory,
    Stagnation,
    Status,
    Widening,
)
from loopwise.core.search.conformance import SearchConformance


class TestMCTS(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return MCTS(seed=seed, max_evals=max_evals)


class TestGreedy(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return Greedy(seed=seed, max_evals=max_evals)


class TestBeam(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return Beam(3, seed=seed, max_evals=max_evals)


class TestRandomSearch(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return RandomSearch(seed=seed, max_evals=max_evals)


class TestBestOfN(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return BestOfN(seed=seed, max_evals=max_evals)


# -- records and calibration -------------------------------------------------------------------


def test_outcome_validates_status_and_value() -> None:
    assert Outcome("correct", 2).value == 2.0 and Outcome("oom").status is Status.OOM
    for bad in (None, 0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            Outcome("correct", bad)
    with pytest.raises(ValueError):
        Outcome("timeout", 1.0)
    with pytest.raises(ValueError):
        Outcome("segfault")
    assert Outcome.from_dict(Outcome("crash").to_dict()) == Outcome("crash")


def test_every_failure_status_has_a_penalty_ordered_by_severity() -> None:
    assert set(DEFAULT_PENALTIES) == set(Status) - {Status.CORRECT}
    cal = RewardCalibrator()
    assert all(cal.penalty(s) < 0 for s in DEFAULT_PENALTIES)
    assert cal.penalty("exploit") == -REWARD_CLIP == min(DEFAULT_PENALTIES.values())
    assert cal.penalty("oom") > cal.penalty("compile_error") > cal.penalty("wrong_output")
    assert RewardCalibrator({"oom": -2.0}).penalty(Status.OOM) == -2.0
    with pytest.raises(ValueError):
        RewardCalibrator({"correct": 1.0})


def test_calibration_standardises_log_speedups() -> None:
    cal = RewardCalibrator()
    for speedup in (1.0, 2.0, 4.0):
        cal.observe(speedup)
    assert cal.mean == pytest.approx(math.log(2.0))
    assert cal.std == pytest.approx(math.log(2.0))
    assert cal.reward(Outcome("correct", 2.0)) == pytest.approx(0.0)
    assert cal.reward(Outcome("correct", 8.0)) == pytest.approx(2.0)
    assert cal.reward(Outcome("correct", 1e9)) == REWARD_CLIP
    assert cal.reward(Outcome("timeout")) == DEFAULT_PENALTIES[Status.TIMEOUT]


def test_calibration_std_has_a_floor() -> None:
    cal = RewardCalibrator(min_std=0.05)
    cal.observe(1.0)
    cal.observe(1.0)
    assert cal.std == 0.05


# -- widening, asymmetric branching, pruning -------------------------------------------------------


def test_widening_limit_grows_with_visits() -> None:
    rule = Widening(k=1.0, alpha=0.5)
    assert [rule.limit(n, 1.0) for n in (1, 4, 9, 10, 100)] == [1, 2, 3, 4, 10]
    assert Widening(k=2.0, alpha=0.0).limit(1000, 1.0) == 2


def _star(search: Search, values: list[float | None], prefix: str = "c") -> list[int]:
    ids = []
    for i, value in enumerate(values):
        child = search.add_child(0, f"{prefix}{i}", note=f"move{i}")
        search.tell(child, Outcome("correct", value) if value else Outcome("compile_error"))
        ids.append(child)
    return ids


def test_mcts_expands_until_the_widening_limit_then_descends() -> None:
    search = MCTS(widening=Widening(k=1.0, alpha=0.5, strong=1.0, weak=1.0),
                  pruning=Pruning(None, None))
    search.add_root("root")
    assert search.ask().node_id == 0 and search.widening_limit(0) == 1
    (a,) = _star(search, [1.5])
    # root: 2 visits, 1 child, limit ceil(sqrt 2) = 2, so the root is widened again
    assert search.widening_limit(0) == 2 and search.ask().node_id == 0
    _star(search, [0.9, 0.8], prefix="d")
    # 4 visits, 3 children >= limit 2: descend; the unexpanded child a is expanded
    assert search.widening_limit(0) == 2 and search.ask().node_id == a


def test_asymmetric_budget_favours_nodes_that_beat_their_parent() -> None:
    search = MCTS(widening=Widening(k=2.0, alpha=0.5, strong=2.0, weak=0.5))
    search.add_root("root", value=1.0)
    strong, weak = _star(search, [1.5, 0.7])
    assert search.widening_limit(strong) == 4  # ceil(2 * 1 * 2.0)
    assert search.widening_limit(weak) == 1  # ceil(2 * 1 * 0.5)
    assert search.widening_limit(0) == math.ceil(2 * math.sqrt(3))


def test_failed_children_close_a_node() -> None:
    search = Greedy(pruning=Pruning(max_failed=3, max_stale=None))
    search.add_root("root")
    _star(search, [None, 2.0, None])
    assert search.node(0).state is NodeState.OPEN
    _star(search, [None], prefix="d")
    assert search.node(0).state is NodeState.CLOSED
    assert all(search.ask().node_id != 0 for _ in range(3))


def test_non_improving_streak_closes_a_node_and_an_improvement_resets_it() -> None:
    search = Greedy(pruning=Pruning(max_failed=None, max_stale=3))
    search.add_root("root", value=1.0)
    ids = _star(search, [0.9, 1.0, 1.2, 0.5, 0.9])
    assert search.node(0).state is NodeState.OPEN  # the 1.2 reset the streak at 2
    assert search.add_child(0, "c0") == ids[0]  # a duplicate is a third stale proposal
    assert search.node(0).state is NodeState.CLOSED
    assert search.ask().node_id == ids[2]


def test_closing_by_hand_is_replayed() -> None:
    search = MCTS(seed=3)
    search.add_root("root")
    _star(search, [1.1, 1.2])
    search.close(0)
    restored = Search.from_state_dict(json.loads(json.dumps(search.state_dict())))
    assert restored.node(0).state is NodeState.CLOSED
    with pytest.raises(ValueError):
        MCTS.from_state_dict({**search.state_dict(), "strategy": "Greedy"})


# -- memory ---------------------------------------------------------------------------------------


def test_memory_records_what_was_tried_worked_and_failed() -> None:
    search = Greedy()
    search.add_root("root", value=1.0)
    a = search.add_child(0, "tile", note="tile 64x128")
    search.tell(a, Outcome("correct", 1.5))
    b = search.add_child(a, "tile+unroll", note="unroll 8")
    search.tell(b, Outcome("compile_error"))
    c = search.add_child(a, "tile+vec", note="vectorize")
    search.tell(c, Outcome("correct", 1.2))
    search.add_child(0, "tile", note="tile 64x128")  # duplicate
    memory = search.memory
    notes = memory.notes()
    assert notes["tile 64x128"].tried == 2 and notes["tile 64x128"].duplicates == 1
    assert memory.worked() == [("tile 64x128", 1.5)]
    assert memory.failed() == {"compile_error": ["unroll 8"]}
    assert notes["vectorize"].best_gain == pytest.approx(0.8) and not notes["vectorize"].improved
    text = memory.summary(limit=3)
    assert "Tried 4 proposals" in text and "(1 duplicates)" in text
    assert "tile 64x128 (x1.5)" in text and "compile_error (1x): unroll 8" in text
    assert SearchMemory.from_dict(json.loads(json.dumps(memory.to_dict()))) == memory


def test_memory_counts_a_child_under_its_move_and_keeps_its_note_and_replays_both() -> None:
    search = Greedy()
    search.add_root("root", value=1.0)
    a = search.add_child(0, "a", note="I fused the two loops", move="fuse")
    b = search.add_child(0, "b", note="fusing, with a wider block", move="fuse")
    search.tell(a, Outcome("correct", 0.9))
    search.tell(b, Outcome("wrong_output"))
    search.add_child(0, "a", note="the same again", move="fuse")  # duplicate
    notes = search.memory.notes()
    assert list(notes) == ["fuse"] and notes["fuse"].tried == 3 and notes["fuse"].duplicates == 1
    assert notes["fuse"].failures == {"wrong_output": 1} and search.node(a).note == "I fused the two loops"
    assert "Correct but never faster: fuse." in search.memory.summary()
    assert Greedy.from_state_dict(search.state_dict()).memory == search.memory


def test_memory_summary_respects_the_limit() -> None:
    search = BestOfN()
    search.add_root("root")
    _star(search, [None] * 8)
    line = search.memory.summary(limit=2).splitlines()[-1]
    assert line == "Failed with compile_error (8x): move0, move1, ...."


# -- a synthetic landscape with a known optimum -------------------------------------------------

_FAILURES = ("compile_error", "wrong_output", "timeout", "crash", "oom")


class NeedlePath:
    """Ten moves; five hidden good ones multiply the speedup by 1.25, the rest by 0.80-0.95.

    A state is a set of moves (so different paths reach the same key, and dedup matters). The
    only state within 95% of the optimum, ``1.25**5``, is the set of the five good moves, five
    levels deep. 15% of the other states fail, with a status fixed by the state's hash.
    """

    MOVES = tuple(f"m{i}" for i in range(10))

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.seed = seed
        good = set(rng.sample(self.MOVES, 5))
        self.gain = {m: 1.25 if m in good else rng.uniform(0.8, 0.95) for m in self.MOVES}
        self.optimum = 1.25**5

    @staticmethod
    def key(moves: frozenset[str]) -> str:
        return "+".join(sorted(moves)) or "root"

    @staticmethod
    def moves(key: str) -> frozenset[str]:
        return frozenset() if key == "root" else frozenset(key.split("+"))

    def outcome(self, key: str) -> Outcome:
        speedup = math.prod(self.gain[m] for m in sorted(self.moves(key)))
        h = zlib.crc32(f"{self.seed}:{key}".encode())
        if speedup < 0.95 * self.optimum and h % 100 < 15:
            return Outcome(_FAILURES[(h // 100) % len(_FAILURES)])
        return Outcome("correct", speedup)


def evals_to_optimum(search: Search, land: NeedlePath, budget: int, seed: int) -> int:
    """Runs a simulated proposer (two random unused moves per expansion) until a state within
    95% of the optimum is evaluated; returns the evaluations spent, or ``2 * budget`` if never."""
    proposer = random.Random(seed)
    search.add_root("root")
    for _ in range(10 * budget):  # bounds rounds that only produce duplicates
        ask = search.ask() if search.n_evals < budget else None
        if ask is None:
            break
        state = land.moves(ask.node.key)
        unused = [m for m in land.MOVES if m not in state]
        if not unused:
            search.close(ask.node_id)
            continue
        for move in proposer.sample(unused, min(2, len(unused))):
            child = search.add_child(ask.node_id, land.key(state | {move}), note=move)
            if search.node(child).state is NodeState.PENDING:
                outcome = land.outcome(search.node(child).key)
                search.tell(child, outcome)
                if outcome.ok and outcome.value >= 0.95 * land.optimum:
                    return search.n_evals
    return 2 * budget


def test_mcts_finds_the_optimum_in_fewer_evaluations_than_random() -> None:
    budget, seeds = 300, range(20)
    strategies = {"MCTS": MCTS, "RandomSearch": RandomSearch, "Greedy": Greedy,
                  "Beam(4)": lambda seed: Beam(4, seed=seed)}
    results = {}
    for name, make in strategies.items():
        make = (lambda seed, cls=make: cls(seed=seed)) if isinstance(make, type) else make
        runs = [evals_to_optimum(make(seed), NeedlePath(seed), budget, seed) for seed in seeds]
        results[name] = (statistics.mean(runs), sum(r <= budget for r in runs))
    print(f"\nNeedlePath, {len(seeds)} seeds, budget {budget} (a miss counts {2 * budget}):")
    for name, (mean, hits) in results.items():
        print(f"  {name:13s} mean evals to >=95% of optimum {mean:6.1f}, reached {hits}/20")
    assert results["MCTS"][1] >= 18
    assert results["MCTS"][0] < 0.5 * results["RandomSearch"][0]


class TrapPath(NeedlePath):
    """A deceptive landscape: one trap move worth 1.5x and four combo moves that only pay off
    together, and not at all next to the trap.

    Alone or in part, the combo moves change nothing (x1.0); all four together give the
    optimum, 4.9x, unless the trap is in the state too. The other five moves cost 0.80-0.95.
    Roles come from the seeded generator over the ordered move tuple, so the landscape does not
    depend on set iteration order. Failures follow ``NeedlePath``.
    """

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.seed = seed
        order = rng.sample(self.MOVES, len(self.MOVES))
        self.trap, self.combo = order[0], tuple(sorted(order[1:5]))
        self.gain = {m: rng.uniform(0.8, 0.95) for m in self.MOVES}
        self.gain.update({self.trap: 1.5, **dict.fromkeys(self.combo, 1.0)})
        self.optimum = 4.9

    def outcome(self, key: str) -> Outcome:
        moves = self.moves(key)
        if self.trap not in moves and all(m in moves for m in self.combo):
            return Outcome("correct", self.optimum * math.prod(
                self.gain[m] for m in sorted(moves - set(self.combo))))
        return super().outcome(key)


def test_mcts_escapes_a_deceptive_trap_at_least_as_often_as_random() -> None:
    budget, seeds = 300, range(20)
    strategies = {"MCTS": MCTS, "RandomSearch": RandomSearch, "Greedy": Greedy,
                  "Beam(4)": lambda seed: Beam(4, seed=seed)}
    hits = {}
    for name, make in strategies.items():
        make = (lambda seed, cls=make: cls(seed=seed)) if isinstance(make, type) else make
        runs = [evals_to_optimum(make(seed), TrapPath(seed), budget, seed) for seed in seeds]
        hits[name] = sum(r <= budget for r in runs)
        print(f"  TrapPath {name:13s} mean evals {statistics.mean(runs):6.1f}, "
              f"reached {hits[name]}/20")
    assert hits["MCTS"] >= hits["RandomSearch"]


def test_stagnation_penalises_a_subtree_until_it_improves() -> None:
    rule = Stagnation(patience=2, penalty=1.0)
    assert [rule.decay(n, 0) for n in (1, 2, 3, 6)] == [0.0, 0.0, 0.5, 2.0]
    search = MCTS(stagnation=rule, pruning=Pruning(None, None))
    search.add_root("root")
    (a,) = _star(search, [1.5])
    for i, value in enumerate([1.2, 1.1, None, 1.3]):
        child = search.add_child(a, f"a{i}")
        search.tell(child, Outcome("correct", value) if value else Outcome("crash"))
    entry = search._entry(a)
    assert (entry.visits, entry.best_at) == (5, 1)
    assert rule.decay(entry.visits, entry.best_at) == 1.0
    child = search.add_child(a, "a9")
    search.tell(child, Outcome("correct", 2.0))
    assert (entry.best_at, rule.decay(entry.visits, entry.best_at)) == (6, 0.0)
    with pytest.raises(ValueError):
        Stagnation(patience=0)


def test_non_default_settings_survive_the_state_dict() -> None:
    search = MCTS(seed=9, exploration=1.2, greed=0.2, widening=Widening(k=3.0, alpha=0.3),
                  stagnation=Stagnation(patience=7, penalty=0.25), pruning=Pruning(max_failed=2, max_stale=None), penalties={"oom": -2.0})
    search.add_root("root")
    restored = Search.from_state_dict(json.loads(json.dumps(search.state_dict())))
    assert restored.state_dict() == search.state_dict()
    assert (restored.widening, restored.pruning) == (Widening(3.0, 0.3), Pruning(2, None))
    assert restored.stagnation == Stagnation(7, 0.25)
    assert restored.calibrator.penalty("oom") == -2.0
    with pytest.raises(ValueError):
        MCTS(greed=1.5)


# -- repair: a failed candidate can be expanded once by a repair request ------------------------

def test_a_failed_node_is_asked_for_repair_before_anything_else():
    search = MCTS(seed=0, max_evals=10, repairs=1)
    search.add_root("ref")
    assert search.ask().repair is False
    bad = search.add_child(0, "bad", note="typo")
    search.tell(bad, Outcome(Status.CRASH))
    ask = search.ask()
    assert ask.node_id == bad and ask.repair is True
    fix = search.add_child(bad, "fix", note=f"repair of node {bad}")
    search.tell(fix, Outcome(Status.CORRECT, 1.5))
    assert search.node(fix).parent_id == bad and search.n_evals == 2  # a repair counts against the budget
    assert all(not search.ask().repair for _ in range(3))  # repaired once: never asked again
    assert search.node(fix).state is NodeState.OPEN


def test_a_failed_repair_is_repaired_while_the_chain_is_within_the_limit():
    search = MCTS(seed=0, repairs=2)
    search.add_root("ref")
    search.ask()
    first = search.add_child(0, "a")
    search.tell(first, Outcome(Status.COMPILE_ERROR))
    assert search.ask().node_id == first
    second = search.add_child(first, "b")
    search.tell(second, Outcome(Status.WRONG_OUTPUT))
    assert search.ask().node_id == second  # second attempt of the chain
    third = search.add_child(second, "c")
    search.tell(third, Outcome(Status.EXPLOIT))
    assert not search.ask().repair  # two repairs of one lineage were spent


def test_a_declined_repair_closes_the_failed_node_for_good_and_replays():
    search = MCTS(seed=0, repairs=1)
    search.add_root("ref")
    search.ask()
    bad = search.add_child(0, "bad")
    search.tell(bad, Outcome(Status.TIMEOUT))
    assert search.ask().node_id == bad
    search.close(bad)  # the proposer had no repair to offer
    assert not search.ask().repair
    restored = Search.from_state_dict(json.loads(json.dumps(search.state_dict())))
    assert restored.state_dict() == search.state_dict()


def test_without_repairs_a_failed_node_stays_a_leaf():
    search = MCTS(seed=0)
    search.add_root("ref")
    search.ask()
    bad = search.add_child(0, "bad")
    search.tell(bad, Outcome(Status.CRASH))
    assert search.ask().node_id == 0
    with pytest.raises(ValueError):
        search.add_child(bad, "fix")
