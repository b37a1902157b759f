"""The baselines' search spaces: the grid moves every knob the tree's transitions move, its points
spread evenly over each knob's levels, and a budget prices stages in samples or tokens."""

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
