"""The signal probe stops a transition only on evidence: at 95% confidence at least 90% of the
stage's groups would have no reward variance. A small group is uniform by chance even when the
task is learnable (two samples at pass rate p agree with probability p^2 + (1-p)^2), so a handful of
uniform groups is not that evidence; the probe samples enough groups for it (its first step's,
topped up) and pays for every sample it draws."""

from __future__ import annotations

import math

import pytest

from loopwise.training.compute import Compute
from loopwise.training.config import StageConfig
from loopwise.training.learning_signal import (CONFIDENCE, DECISION_GROUPS, NO_SIGNAL_SHARE, SignalProbe,
                                               probe_groups)


def _at_least(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed exactly."""
    return math.fsum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def _probe(uniform: int, groups: int) -> SignalProbe:
    return SignalProbe(StageConfig(), groups, uniform, 0.0, Compute(groups * 8, groups * 40))


@pytest.mark.parametrize("groups", [1, 2, 8, 28, 29, 30, 40, 64, 128])
def test_a_stop_is_a_one_sided_binomial_test_at_the_stated_confidence(groups):
    """A probe stops exactly when its count of uniform groups would be this high or higher with
    probability at most 5% if only 90% of the stage's groups were uniform: a stage whose groups
    carry a signal more often than one in ten is stopped with probability at most 5%."""
    for uniform in range(groups + 1):
        unlikely = _at_least(uniform, groups, NO_SIGNAL_SHARE) <= 1 - CONFIDENCE
        assert _probe(uniform, groups).learnable is not unlikely, (uniform, groups)


def test_eight_uniform_groups_of_a_first_step_are_not_enough_evidence():
    assert _probe(8, 8).learnable  # at most 8 groups, even all uniform, cannot show 90% at 95% confidence
    assert DECISION_GROUPS == 29 and _probe(28, 28).learnable and not _probe(29, 29).learnable
    assert "at least 90% of the stage's groups" in _probe(29, 29).describe()


@pytest.mark.parametrize("steps, prompts, groups", [
    (12, 8, 29),  # the cpu preset: the first step's 8 groups topped up to 29 (a stage has 96)
    (25, 16, 29), (60, 32, 32),  # small, full: a first step of 32 groups decides alone
    (8, 4, None),  # smoke: 32 groups a stage; a 29-group probe would save 3 and may waste 25
    (8, 2, None),  # lm-cpu: the stage has fewer groups than a decision needs
])
def test_a_probe_is_sized_for_a_decision_and_taken_only_where_it_can_pay_for_itself(steps, prompts, groups):
    config = StageConfig(steps=steps, prompts_per_step=prompts, num_generations=8)
    assert probe_groups(config) == groups


TASK = (
    "import random\n"
    "class Coin:\n"
    "    '''Every completion passes independently: with probability 0.5 at difficulty 0, never at 1,\n"
    "    always at 2.'''\n"
    "    name = 'coin'\n"
    "    max_difficulty = 2\n"
    "    def __init__(self):\n"
    "        self.rng = random.Random(0)\n"
    "    def example(self, rng, difficulty):\n"
    "        a = rng.randint(0, 99999)\n"
    "        return {'prompt': f'{difficulty}:{a}=', 'answer': str(a % 10), 'level': difficulty}\n"
    "    def score(self, example, completion):\n"
    "        level = example.meta['level']\n"
    "        return float(self.rng.random() < 0.5) if level == 0 else float(level == 2)\n"
    "    def max_answer_length(self, difficulty):\n"
    "        return 1\n")


def test_a_learnable_task_at_group_size_two_is_not_stopped_and_a_hopeless_one_is(tmp_path):
    """Pass rate 0.5 at group size 2: half the groups are uniform by chance, and a first step of 2
    groups is all uniform one time in four; over 20 probes none stops. Pass rate 0 or 1: every
    probe stops, after the groups a decision needs. Every probe's samples are paid."""
    from loopwise.training import session as session_mod

    path = tmp_path / "coin.py"
    path.write_text(TASK)
    s = session_mod.Session(str(path), "smoke", difficulty=0)
    state = session_mod._state_bytes(s.new_policy())
    config = s.default_config().model_copy(update={"num_generations": 2, "prompts_per_step": 2, "steps": 40})
    spent = Compute()
    for seed in range(20):
        coin = s.probe_signal(state, config, seed=seed)
        spent = spent + coin.compute
        assert coin.learnable, coin.describe()
    for difficulty in (1, 2):
        for seed in range(3):
            hopeless = s.probe_signal(state, config.model_copy(update={"difficulty": difficulty}), seed=seed)
            spent = spent + hopeless.compute
            assert not hopeless.learnable and hopeless.groups == hopeless.zero_variance == DECISION_GROUPS
            assert hopeless.compute.samples == DECISION_GROUPS * 2 and hopeless.first.samples == 4
    assert s.spent == spent


def test_an_admitted_probe_pays_its_top_up_and_not_its_first_step_twice(tmp_path):
    """A verifier that fails the first step's every completion and then passes every other one: the
    probe tops up, finds groups with a signal and admits the stage, which charges its steps but
    the first; the top-up stays paid, so the session spent the stage plus the top-up."""
    from loopwise.training import session as session_mod
    from loopwise.training.compute import stage_compute

    path = tmp_path / "late.py"
    path.write_text(
        "class Late:\n"
        "    name = 'late'\n"
        "    max_difficulty = 1\n"
        "    calls = 0\n"
        "    def example(self, rng, difficulty):\n"
        "        a = rng.randint(0, 99999)\n"
        "        return {'prompt': f'{a}=', 'answer': str(a % 10)}\n"
        "    def score(self, example, completion):\n"
        "        self.calls += 1\n"
        "        return float(self.calls > 4 and self.calls % 2 == 0)\n"
        "    def max_answer_length(self, difficulty):\n"
        "        return 1\n")
    s = session_mod.Session(str(path), "smoke", difficulty=0)
    state = session_mod._state_bytes(s.new_policy())
    config = s.default_config().model_copy(update={"num_generations": 2, "prompts_per_step": 2, "steps": 30})
    probe = s.probe_signal(state, config, seed=1)
    assert probe.learnable and probe.groups == DECISION_GROUPS and probe.zero_variance == 2
    top_up = probe.compute - probe.first
    assert probe.first.samples == 4 and top_up.samples == 2 * (DECISION_GROUPS - 2)
    result = s.run_stage(state, config, seed=1, probed=probe)
    assert s.spent == stage_compute(result.trace, config.model_dump()) + top_up
