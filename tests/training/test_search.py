"""The tree's expansions and the baselines' search spaces: a node without findings is continued
unchanged, one with findings answered; the grid moves every knob the tree's transitions move, its
points spread evenly over each knob's levels, and a budget prices stages in samples or tokens."""

from __future__ import annotations

from collections import Counter

import pytest

from loopwise.training.compute import Budget, Compute
from loopwise.training.config import CAPACITY, REGULARIZATION, StageConfig
from loopwise.training.baselines import grid_configs, grid_levels
from loopwise.training.session import Session
from loopwise.training.transitions import STEPS


@pytest.fixture(scope="module")
def session():
    return Session("arithmetic", "smoke")


def test_the_grid_moves_every_knob_the_tree_moves(session):
    levels = grid_levels(session)
    assert set(levels) == set(STEPS) == set(CAPACITY + REGULARIZATION)
    base = session.default_config()
    for knob, values in levels.items():
        assert values[0] == getattr(base, knob) and len(values) >= 2, knob
    assert set(levels["num_generations"]) == {base.num_generations // 2, base.num_generations,
                                              2 * base.num_generations}
    assert len(set(levels["temperature"])) == 3


def test_grid_points_use_each_knobs_levels_equally_often(session):
    levels = grid_levels(session)
    points = grid_configs(session, 6, seed=1)
    assert len(points) == 6 and len(set(points)) == 6
    for knob, values in levels.items():
        counts = Counter(getattr(p, knob) for p in points)
        assert set(counts) <= set(values) and max(counts.values()) - min(counts.values()) <= 1, knob
    assert grid_configs(session, 6, seed=1) == points and grid_configs(session, 6, seed=2) != points


def test_a_budget_prices_a_stage_in_samples_or_tokens():
    cfg = StageConfig(steps=3, prompts_per_step=4, num_generations=8, max_completion_length=5)
    assert Budget("samples", 200).stage_cost(cfg) == 96
    assert Budget("tokens", 200).stage_cost(cfg, steps=1) == 160  # every completion at full length
    assert Budget("samples", 200).fits(Compute(100, 0), cfg) and not Budget("samples", 200).fits(Compute(105, 0), cfg)
    assert Budget("tokens", 500).fits(Compute(0, 20), cfg, steps=3) is True
    assert Budget("samples", 200).stages(cfg) == 2
    with pytest.raises(ValueError):
        Budget("stages", 3)


class _FakeSession:
    """Stands in for a Session: every stage returns ``trace`` and a slightly better tune reward."""

    def __init__(self, trace):
        from types import SimpleNamespace

        self.trace, self.spent, self.base_state, self.base_tune = trace, Compute(), b"base", 0.3
        self.task = SimpleNamespace(max_difficulty=3)
        self.tune, self.max_len, self.trained = [SimpleNamespace(prompt="12+34=")], 64, []
        self.learning_rate_range = (1e-4, 1e-3)

    def prompt_tokens(self, prompt):
        return len(prompt)  # a character policy's

    def default_config(self):
        return StageConfig(steps=8, prompts_per_step=2, num_generations=4, max_completion_length=6)

    def run_stage(self, parent, config, seed, label=None, probed=None):
        from loopwise.training.session import StageResult

        self.spent = self.spent + Compute(config.steps * config.prompts_per_step * config.num_generations, 0)
        self.spent = self.spent - (probed.compute if probed is not None else Compute())
        self.trained.append((parent, config, label))
        return StageResult(config, parent + b"+", self.trace, 0.3 + 0.01 * len(self.trained), 0.3, 0.0)

    def probe_signal(self, parent, config, seed, label=None):
        from loopwise.training.learning_signal import SignalProbe

        probe = SignalProbe(config, config.prompts_per_step, 0, 0.5,
                            Compute(config.prompts_per_step * config.num_generations, 0))
        self.spent = self.spent + probe.compute
        return probe

    allowance = None  # a sample budget's session

    def value(self, tune):
        return (tune + 0.01) / (self.base_tune + 0.01)


def _tree_children(trace):
    from loopwise.training.search import tree_search

    fake = _FakeSession(trace)
    tree_search(fake, Budget("samples", 12 * 64), depth=3, seed=0)
    by_parent: dict = {}
    for parent, config, label in fake.trained:
        by_parent.setdefault(label["parent"], []).append((config, label["why"]))
    configs = {label["node"]: config for _, config, label in fake.trained}
    return by_parent, configs


def test_a_node_without_findings_is_continued_unchanged_and_one_with_findings_is_answered():
    from loopwise.training import metrics as m
    from loopwise.training.search import CONTINUE

    healthy = [{m.STEP: i, m.REWARD: 0.5, m.GREEDY_REWARD: 0.3 + 0.02 * i, m.FRAC_ZERO_STD: 0.3} for i in range(12)]
    by_parent, configs = _tree_children(healthy)
    below = [p for p in by_parent if p != 0]
    assert below and all(any(c == configs[p] and why == CONTINUE for c, why in by_parent[p]) for p in below)
    stuck = [{m.STEP: i, m.REWARD: 0.05, m.GREEDY_REWARD: 0.1, m.GREEDY_PROMPTS: 512, m.FRAC_ZERO_STD: 0.3}
             for i in range(12)]  # a probe large enough to show the stall
    by_parent, configs = _tree_children(stuck)
    below = [p for p in by_parent if p != 0]
    assert below and all(c != configs[p] for p in below for c, _ in by_parent[p])
    for p in below:  # lower the difficulty, or at difficulty 0 say that it cannot and explore
        why = by_parent[p][0][1]
        assert why.startswith("Answers too_hard: difficulty") if configs[p].difficulty > 0 else \
            "too_hard cannot be answered within bounds" in why
