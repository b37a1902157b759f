"""Expert transitions: one coordinated multi-knob move per set of findings, kept in bounds, with
distinct seeded siblings; and the knob-trajectory classification of a path."""

import random

import pytest

from loopwise.training import metrics as m
from loopwise.training.config import CAPACITY, REGULARIZATION, StageConfig
from loopwise.training.diagnose import diagnose
from loopwise.training.findings import make_finding
from loopwise.training.transitions import (
    STEPS,
    Bounds,
    Step,
    Transition,
    directions,
    path_directions,
    propose_transitions,
)


def finding(kind, score, **suggests):
    return make_finding(kind, f"{kind} seen (score {score}).", {"x": 1.0}, score, suggests)


COLLAPSE = finding("entropy_collapse", 0.8, temperature="up", entropy_coef="up", learning_rate="down")
SOLVED = finding("groups_all_solved", 0.6, difficulty="up")
BASE = StageConfig(difficulty=3, learning_rate=3e-4, temperature=1.0, beta=0.01)


def moved(transition):
    return {k: "up" if new > old else "down" for k, (old, new) in transition.changes.items()}


def test_combined_findings_make_one_coordinated_move():
    first = propose_transitions(BASE, [COLLAPSE, SOLVED], random.Random(0))[0]
    assert moved(first) == {"temperature": "up", "entropy_coef": "up", "learning_rate": "down", "difficulty": "up"}
    assert first.changes["learning_rate"] == (3e-4, 1.5e-4) and first.changes["difficulty"] == (3, 4)
    assert first.changes["temperature"] == (1.0, 1.25) and first.changes["entropy_coef"] == (0.0, 1e-3)
    assert "entropy_collapse" in first.rationale and "groups_all_solved" in first.rationale
    assert dict(first.changes) == BASE.changed(first.config)


@pytest.mark.parametrize("lr_down_score,expected", [(0.9, "down"), (0.2, "up")])
def test_a_conflict_goes_the_way_of_the_higher_scored_finding(lr_down_score, expected):
    down = finding("kl_blowup", lr_down_score, learning_rate="down", beta="up")
    up = finding("reward_plateau", 0.5, learning_rate="up")
    first = propose_transitions(BASE, [up, down], random.Random(0))[0]
    assert moved(first)["learning_rate"] == expected and moved(first)["beta"] == "up"


def test_at_the_bound_nothing_moves_past_it():
    bounds = Bounds.for_task(3)
    at_edge = StageConfig(difficulty=3, learning_rate=1e-5, temperature=2.0)
    findings = [finding("a", 0.9, learning_rate="down", temperature="up", difficulty="up", beta="up")]
    out = propose_transitions(at_edge, findings, random.Random(1), n=8, bounds=bounds)
    assert moved(out[0]) == {"beta": "up"}  # the only answerable part of the finding
    for t in out:
        assert t.config.learning_rate >= 1e-5 and t.config.temperature <= 2.0 and t.config.difficulty <= 3


@pytest.mark.parametrize("seed", range(5))
def test_every_sibling_stays_in_bounds_and_is_distinct(seed):
    bounds = Bounds.for_task(5)
    out = propose_transitions(BASE, [COLLAPSE, SOLVED], random.Random(seed), n=10, bounds=bounds)
    assert len(out) == 10
    configs = [t.config for t in out]
    assert len(set(configs)) == 10 and BASE not in configs
    for config in configs:
        for knob in CAPACITY + REGULARIZATION:
            lo, hi = getattr(bounds, knob)
            assert lo <= getattr(config, knob) <= hi, (knob, getattr(config, knob))


def test_a_step_that_overshoots_is_clamped_to_the_bound():
    config = StageConfig(learning_rate=2e-3, max_completion_length=200)
    grow = [finding("truncation", 0.9, max_completion_length="up", learning_rate="up")]
    first = propose_transitions(config, grow, random.Random(0))[0]
    assert first.config.max_completion_length == 256 and first.config.learning_rate == 3e-3


def test_same_seed_same_transitions_and_siblings_vary_with_the_seed():
    def run(seed):
        out = propose_transitions(BASE, [COLLAPSE, SOLVED], random.Random(seed), n=4)
        return [(t.config, t.rationale) for t in out]

    assert run(7) == run(7)
    assert len({tuple(run(s)[1:]) == tuple(run(0)[1:]) for s in range(10)}) == 2  # some seeds differ
    assert len({run(s)[0] for s in range(10)}) == 1  # the rule-based first one never does


def test_siblings_vary_the_coordinated_move():
    out = propose_transitions(BASE, [COLLAPSE, SOLVED], random.Random(0), n=6)
    first = set(out[0].changes)
    for sibling in out[1:]:
        assert sibling.changes and sibling.config != out[0].config
        assert set(sibling.changes) & first or "alone" in sibling.rationale or "Explores" in sibling.rationale


def test_without_findings_no_direction_is_preferred():
    """No finding: single-knob moves in seeded order, capacity knobs down as often as up."""
    firsts = [propose_transitions(BASE, [], random.Random(seed))[0] for seed in range(200)]
    seen = {(k, d) for t in firsts for k, d in moved(t).items()}
    for knob in CAPACITY:
        assert {(knob, "up"), (knob, "down")} <= seen, knob
    assert all(len(t.changes) == 1 and t.rationale.startswith("Explores one knob") for t in firsts)
    capacity = [d for t in firsts for k, d in moved(t).items() if k in CAPACITY]
    assert abs(capacity.count("up") - capacity.count("down")) < len(capacity) / 3


def test_findings_blocked_by_bounds_explore_instead():
    config = StageConfig(learning_rate=1e-5)
    blocked = [finding("kl_blowup", 0.9, learning_rate="down")]
    out = propose_transitions(config, blocked, random.Random(0), n=4)
    assert all(t.config != config and len(t.changes) == 1 for t in out)
    assert "kl_blowup cannot be answered within bounds" in out[0].rationale


def test_nothing_can_change_returns_the_config_once():
    config = StageConfig(difficulty=2)
    pinned = Bounds(**{k: (getattr(config, k), getattr(config, k)) for k in CAPACITY + REGULARIZATION})
    out = propose_transitions(config, [COLLAPSE, SOLVED], random.Random(0), n=3, bounds=pinned)
    assert len(out) == 1 and out[0].config == config and not out[0].changes


def test_n_must_not_be_negative_and_bounds_must_be_ordered():
    assert propose_transitions(BASE, [COLLAPSE], random.Random(0), n=0) == []
    with pytest.raises(ValueError):
        propose_transitions(BASE, [], random.Random(0), n=-1)
    with pytest.raises(ValueError):
        Bounds(temperature=(2.0, 1.0))


@pytest.mark.parametrize("knob,value,direction,scale,expected", [
    ("beta", 0.0, "up", 1.0, 1e-3),  # a switched-off term starts at its start value
    ("beta", 1e-3, "down", 1.0, 0.0),  # ... and below it switches off again
    ("learning_rate", 3e-4, "up", 1.0, 6e-4),
    ("learning_rate", 3e-4, "down", 2.0, 7.5e-5),
    ("epsilon_high", 0.28, "up", 1.0, 0.33),
    ("difficulty", 2, "up", 0.5, 3),  # an integer knob always moves by at least one
    ("max_completion_length", 16, "up", 0.5, 23),
    ("num_generations", 8, "down", 1.0, 4),
])
def test_step_rules(knob, value, direction, scale, expected):
    assert STEPS[knob].move(value, direction, scale) == pytest.approx(expected)


def test_every_knob_has_a_step_and_a_bound():
    assert set(STEPS) == set(CAPACITY + REGULARIZATION)
    assert all(isinstance(STEPS[k], Step) and hasattr(Bounds(), k) for k in STEPS)


def test_directions_classifies_each_knob():
    path = [StageConfig(difficulty=1, max_completion_length=16, learning_rate=3e-4, beta=0.0, temperature=1.0),
            StageConfig(difficulty=2, max_completion_length=16, learning_rate=1.5e-4, beta=0.0, temperature=0.9),
            StageConfig(difficulty=2, max_completion_length=32, learning_rate=3e-4, beta=0.0, temperature=0.9),
            StageConfig(difficulty=4, max_completion_length=64, learning_rate=3e-4, beta=0.0, temperature=0.8)]
    got = directions(path)
    assert got["difficulty"] == got["max_completion_length"] == "monotone_up"
    assert got["learning_rate"] == "oscillating"
    assert got["temperature"] == "monotone_down"
    assert got["beta"] == got["num_generations"] == "constant"
    assert set(got) == set(CAPACITY + REGULARIZATION)
    assert set(directions(path[:1]).values()) == set(directions([]).values()) == {"constant"}


def _paths():
    """Four root-to-node paths from a start: unchanged; learning rate up; up then down; up, down,
    then difficulty up."""
    start = StageConfig(learning_rate=1e-4, difficulty=1)
    up = start.model_copy(update={"learning_rate": 2e-4})
    back = up.model_copy(update={"learning_rate": 1e-4})
    harder = back.model_copy(update={"difficulty": 2})
    return [[start, start], [start, up], [start, up, back], [start, up, back, harder]]


def test_directions_over_every_path_are_counted_per_knob_with_the_paths_that_could_reverse():
    got = path_directions(_paths())
    assert got["paths"] == 4 and got["moves"] == {"1": 2, "2": 1, "3": 1}
    assert got["long_enough"] == 2  # a reversal needs two moves
    assert got["knobs"]["learning_rate"] == {"monotone_up": 1, "monotone_down": 0, "oscillating": 2, "constant": 1,
                                             "moved_twice": 2}
    assert got["knobs"]["difficulty"] == {"monotone_up": 1, "monotone_down": 0, "oscillating": 0, "constant": 3,
                                          "moved_twice": 0}
    assert set(got["knobs"]) == set(CAPACITY + REGULARIZATION)
    classes = ("monotone_up", "monotone_down", "oscillating", "constant")
    assert all(sum(c[k] for k in classes) == 4 for c in got["knobs"].values())
    assert path_directions([]) == {"paths": 0, "moves": {}, "long_enough": 0,
                                   "knobs": {k: dict.fromkeys(classes + ("moved_twice",), 0)
                                             for k in CAPACITY + REGULARIZATION}}


def test_the_counts_favour_no_direction():
    """Paths mirrored (every move the other way) give the counts mirrored."""
    def mirror(c):
        return c.model_copy(update={"learning_rate": 1e-8 / c.learning_rate, "difficulty": 10 - c.difficulty})

    there, back = path_directions(_paths()), path_directions([[mirror(c) for c in p] for p in _paths()])
    for knob in ("learning_rate", "difficulty"):
        a, b = there["knobs"][knob], back["knobs"][knob]
        assert (a["monotone_up"], a["monotone_down"]) == (b["monotone_down"], b["monotone_up"])
        assert [a[k] for k in ("oscillating", "constant", "moved_twice")] == [
            b[k] for k in ("oscillating", "constant", "moved_twice")]


def test_directions_read_configs_as_records_or_as_dicts():
    path = _paths()[3]
    assert directions([c.model_dump() for c in path]) == directions(path)


@pytest.mark.parametrize("direction", ["up", "down"])
def test_capacity_follows_the_findings_either_way(direction):
    """A path whose findings keep asking for a smaller group and a shorter cap shrinks both: a
    monotone capacity knob is the findings' doing, in whichever direction they point."""
    ask = finding("capacity", 0.5, num_generations=direction, max_completion_length=direction)
    config, path = StageConfig(num_generations=8, max_completion_length=32), []
    for _ in range(3):
        path.append(config)
        config = propose_transitions(config, [ask], random.Random(0))[0].config
    got = directions(path + [config])
    assert got["num_generations"] == got["max_completion_length"] == f"monotone_{direction}"


def test_diagnosis_to_transition_end_to_end():
    trace = [{m.STEP: i, m.REWARD: 0.05, m.CLIPPED: 0.95, m.LENGTH: 16.0, m.ENTROPY: 1.5} for i in range(20)]
    config = StageConfig(max_completion_length=16)
    first = propose_transitions(config, diagnose(trace, config), random.Random(0))[0]
    assert isinstance(first, Transition)
    assert first.changes["max_completion_length"] == (16, 32) and "truncation" in first.rationale


def test_a_finding_that_asks_for_nothing_is_not_reported_as_unanswerable():
    undecided = finding("progress_undecided", 0.0)
    for t in propose_transitions(StageConfig(), [undecided], random.Random(0), n=3):
        assert "cannot be answered" not in t.rationale and t.rationale.startswith("Explores one knob")
