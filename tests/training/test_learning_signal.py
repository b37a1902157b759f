"""The tree's guard against stages that learn nothing: a stage whose groups all lack reward variance
is flagged with its share, a transition whose one-step probe finds no group with a signal is not
applied (the probe's samples are paid from the budget), and a trained node that learned nothing is
not expanded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from loopwise.training import metrics as m
from loopwise.training.compute import Budget, Compute
from loopwise.training.config import StageConfig
from loopwise.training.diagnose import diagnose
from loopwise.training.learning_signal import NO_SIGNAL_SHARE, SignalProbe, probe_groups, zero_variance_share


def _trace(reward: float, zero: float, greedy: float, steps: int = 12) -> list[dict]:
    return [{m.STEP: i + 1, m.REWARD: reward, m.FRAC_ZERO_STD: zero, m.GREEDY_REWARD: greedy,
             m.SAMPLES: 8, m.TOKENS: 40} for i in range(steps)]


@pytest.mark.parametrize("reward, move", [(0.0, ("difficulty", "down")), (1.0, ("difficulty", "up")),
                                          (0.5, ("temperature", "up"))])
def test_a_stage_whose_groups_had_no_reward_variance_is_flagged_with_the_share(reward, move):
    found = {f.tool: f for f in diagnose(_trace(reward, 1.0, 0.5), StageConfig())}
    flag = found["no_learning_signal"]
    assert "100% of the stage's groups had no reward variance" in flag.guidance
    assert flag.evidence["zero_variance_share"] == 1.0 and flag.severity == "high"
    assert move in {(mv.knob, mv.direction) for mv in flag.moves}
    assert zero_variance_share(_trace(reward, 1.0, 0.5) + [{m.STEP: 13, m.EVAL_REWARD: 0.2}]) == 1.0


def test_a_stage_with_signal_in_some_groups_is_not_flagged():
    trace = _trace(0.3, 0.5, 0.3)
    trace[0][m.FRAC_ZERO_STD] = 0.0  # one step with a signal in every group: 46% of groups over the stage
    assert zero_variance_share(trace) == pytest.approx(5.5 / 12)
    assert "no_learning_signal" not in {f.tool for f in diagnose(trace, StageConfig())}


class _ScriptedSession:
    """Stands in for a Session on a task whose difficulty 2 and above no sample of the policy solves:
    stages there have no reward variance in any group (and a probe says so, when ``probe_sees`` is
    left on); at difficulty 0 and 1 the greedy probe is solved, so the diagnosis asks for more."""

    def __init__(self, probe_sees: bool = True):
        self.spent, self.base_state, self.base_tune = Compute(), b"base", 0.3
        self.task = SimpleNamespace(max_difficulty=4)
        self.tune, self.max_len = [SimpleNamespace(prompt="12+34=")], 64
        self.learning_rate_range = (1e-4, 1e-3)
        self.trained, self.probed, self.probe_sees = [], [], probe_sees

    def prompt_tokens(self, prompt):
        return len(prompt)

    def default_config(self):  # long enough stages for a probe to pay (probe_groups)
        return StageConfig(steps=40, prompts_per_step=2, num_generations=4, max_completion_length=6)

    @staticmethod
    def hard(config):
        return config.difficulty >= 2

    def run_stage(self, parent, config, seed, label=None, probed=None):
        from loopwise.training.session import StageResult

        samples = config.steps * config.prompts_per_step * config.num_generations
        # a stage admitted by a probe trains on the probe's samples as its first step
        self.spent = self.spent + Compute(samples, 0) - (probed.compute if probed is not None else Compute())
        self.trained.append((config, label))
        trace = _trace(0.0, 1.0, 0.0) if self.hard(config) else _trace(0.9, 0.3, 0.95)
        # a stage without signal leaves the weights (and so the tune reward) where they were
        tune = 0.3 if self.hard(config) else 0.3 + 0.01 * len(self.trained)
        return StageResult(config, parent + b"+", trace, tune, 0.3, 0.0)

    def probe_signal(self, parent, config, seed, label=None, top_up=True):
        # as the real probe: the first step; topped up to a verdict's groups (where the caller has
        # room for them) while every group is uniform
        n, first = config.num_generations, config.prompts_per_step
        dead = self.hard(config) and self.probe_sees
        groups = probe_groups(config) if dead and top_up else first
        probe = SignalProbe(config, groups, groups if dead else 0, 0.0, Compute(groups * n, 0), Compute(first * n, 0))
        self.spent = self.spent + probe.compute
        self.probed.append((config, label, probe))
        return probe

    allowance = None  # a sample budget's session

    def value(self, tune):
        return (tune + 0.01) / (self.base_tune + 0.01)


def test_the_tree_does_not_train_a_transition_whose_probe_finds_no_signal():
    from loopwise.training.search import tree_search

    fake = _ScriptedSession()
    budget = Budget("samples", 12 * 320)  # twelve default stages
    schedule = tree_search(fake, budget, depth=3, seed=0)
    assert len(fake.trained) >= 4 and not any(fake.hard(c) for c, _ in fake.trained)
    assert any(fake.hard(c) for c, _, _ in fake.probed)  # the diagnosis did ask for a harder difficulty
    assert any("not applied" in n and "no reward variance" in n for n in schedule.notes)
    # the rejected probes were paid for: what was spent is the stages' samples plus theirs, each
    # topped up to the groups a verdict needs where the budget had room for them next to the stage
    # (an admitted probe is its stage's first step)
    stages = sum(c.steps * c.prompts_per_step * c.num_generations for c, _ in fake.trained)
    rejected = [p for c, _, p in fake.probed if fake.hard(c)]
    assert any(p.groups == probe_groups(p.config) for p in rejected)
    # near the budget's end the first step alone, uniform, leaves a transition out rather than trained
    assert any(p.groups == p.config.prompts_per_step for p in rejected)
    assert any("groups a verdict needs do not fit the budget" in n for n in schedule.notes)
    assert rejected and fake.spent.samples == stages + sum(p.compute.samples for p in rejected) <= budget.amount


def test_a_node_that_learned_nothing_is_not_expanded():
    from loopwise.training.search import tree_search

    fake = _ScriptedSession(probe_sees=False)  # the probe is fooled; the stage's own trace is not
    schedule = tree_search(fake, Budget("samples", 12 * 320), depth=3, seed=0)
    dead = {label["node"] for c, label in fake.trained if fake.hard(c)}
    assert dead and not any(label["parent"] in dead for _, label in fake.trained)
    assert sum("closed" in n for n in schedule.notes) == len(dead)


def test_a_probe_samples_the_first_step_tops_it_up_for_a_verdict_and_counts_its_samples(tmp_path):
    """A real session on a task of the user's whose difficulty 2 no completion can solve: the probe
    there finds the first step's 8 groups uniform, tops them up to the groups a verdict needs and
    finds those uniform too; at difficulty 0 a group of the first step has a signal and nothing is
    added. Each probe's samples are added to what the session spent."""
    from loopwise.training import session as session_mod
    from loopwise.training.learning_signal import DECISION_GROUPS

    path = tmp_path / "scripted.py"
    path.write_text(
        "class Scripted:\n"
        "    name = 'scripted'\n"
        "    max_difficulty = 2\n"
        "    def example(self, rng, difficulty):\n"
        "        a = rng.randint(0, 99999)\n"
        "        return {'prompt': f'{difficulty}:{a}=', 'answer': str(a % 10), 'level': difficulty}\n"
        "    def score(self, example, completion):\n"
        "        return 0.0 if example.meta['level'] >= 2 else float(completion[:1] in '01234')\n"
        "    def max_answer_length(self, difficulty):\n"
        "        return 1\n")
    s = session_mod.Session(str(path), "smoke", difficulty=0)
    state = session_mod._state_bytes(s.new_policy())  # an untrained policy samples almost uniformly
    config = s.default_config().model_copy(update={"num_generations": 4, "prompts_per_step": 8, "steps": 8})
    easy = s.probe_signal(state, config, seed=3)
    assert easy.groups == 8 and easy.zero_variance < 8 and easy.learnable
    assert s.spent == easy.compute == easy.first and easy.compute.samples == 32 and easy.compute.tokens >= 32
    hard = s.probe_signal(state, config.model_copy(update={"difficulty": 2}), seed=3)
    assert hard.zero_variance == hard.groups == DECISION_GROUPS and hard.share >= NO_SIGNAL_SHARE
    assert not hard.learnable and hard.first.samples == 32 and hard.compute.samples == 4 * DECISION_GROUPS
    assert "29 of 29 probe groups (100%) had no reward variance" in hard.describe()
    assert s.spent == easy.compute + hard.compute
    assert s.probe_signal(state, config, seed=3) == easy  # taken once; paid for each time it is asked
    assert s.spent.samples == 32 + 116 + 32


def test_an_admitted_probe_is_its_stages_first_step_and_is_not_paid_twice():
    """The probe draws what the stage's first step draws (prompts, completions, rewards), so the
    stage given it charges only its other steps; a probe of another stage is refused."""
    from loopwise.training import metrics as mt
    from loopwise.training import session as session_mod
    from loopwise.training.compute import stage_compute

    s = session_mod.Session("arithmetic", "smoke", difficulty=0)
    state = session_mod._state_bytes(s.new_policy())
    config = s.default_config().model_copy(update={"steps": 2, "temperature": 1.5})
    probe = s.probe_signal(state, config, seed=7)
    result = s.run_stage(state, config, seed=7, probed=probe)
    first = next(row for row in result.trace if mt.REWARD in row)
    assert (first[mt.SAMPLES], first[mt.TOKENS]) == (probe.compute.samples, probe.compute.tokens)
    assert first[mt.REWARD] == pytest.approx(probe.reward)
    assert first[mt.FRAC_ZERO_STD] == pytest.approx(probe.share)
    assert s.spent == stage_compute(result.trace, config.model_dump())  # the probe's samples once
    with pytest.raises(ValueError, match="not this stage's first step"):
        s.run_stage(state, config, seed=8, probed=probe)
