"""The tuning baselines (random, TPE, PBT) search the tree's knobs over the tree's ranges, and a
config with a larger group or longer completions trains fewer steps, so every run costs what the
default's does."""

from __future__ import annotations

import contextlib
import random
from types import SimpleNamespace

import pytest

from loopwise.errors import UserError
from loopwise.training import hpo
from loopwise.training.baselines import grid_levels, random_configs, random_search
from loopwise.training.compute import Budget, Compute
from loopwise.training.config import StageConfig
from loopwise.training.session import Session, StageResult, tree_bounds
from loopwise.training.space import matched_steps, search_space
from loopwise.training.transitions import STEPS


class FakeSession:
    """Records every stage; its reward is the learning rate's closeness to 3e-4 (no policy trained)."""

    def __init__(self) -> None:
        self.task = SimpleNamespace(max_difficulty=6)
        self.tune, self.max_len = [SimpleNamespace(prompt="12+34=")], 70
        self.learning_rate_range = (1e-4, 1e-3)  # a character policy's (Session.learning_rate_range)
        self.base_state, self.base_tune, self.spent = b"base", 0.1, Compute()
        self.calls: list[StageConfig] = []
        self.allowance, self.base_length = None, None  # a sample budget's session

    def held_to(self, allowance):
        assert allowance is None
        return contextlib.nullcontext()

    def room(self, config: StageConfig) -> bool:
        return True

    def default_config(self) -> StageConfig:
        return StageConfig(steps=12, prompts_per_step=8, num_generations=8, max_completion_length=6, beta=0.0)

    def prompt_tokens(self, prompt: str) -> int:
        return len(prompt)

    def trainable(self, config: StageConfig) -> bool:
        """As if the prompts past difficulty 3 left room for completions of at most 10 tokens."""
        return config.difficulty <= 3 or config.max_completion_length <= 10

    def run_stage(self, parent, config, seed, steps=None, label=None, to_allowance=False) -> StageResult:
        if steps is not None:
            config = config.model_copy(update={"steps": steps})
        if not self.trainable(config):  # what Session.run_stage does: no prompt fits
            raise UserError(f"difficulty {config.difficulty}: no training prompt fits")
        self.calls.append(config)
        self.spent = self.spent + Compute(config.steps * config.prompts_per_step * config.num_generations, 0)
        reward = 1.0 - abs(config.learning_rate - 3e-4) * 1000
        return StageResult(config, parent + b"+", [{"step": config.steps}], reward, reward, 0.0)


@pytest.fixture(scope="module")
def session():
    return Session("arithmetic", "smoke")


def test_the_tuning_space_is_the_tree_s_knobs_over_the_tree_s_ranges(session):
    bounds = tree_bounds(session)
    space = search_space(bounds)
    assert set(space) == set(STEPS) == set(grid_levels(session))
    for name, knob in space.knobs.items():
        low, high = getattr(bounds, name)
        assert knob.high == high and (knob.low == low or (knob.off and low == 0 and knob.low == STEPS[name].start))
    assert space.knobs["num_generations"].integer and space.knobs["learning_rate"].log
    assert space.knobs["beta"].off and not space.knobs["epsilon"].log


def _varies_every_knob(configs: list[StageConfig], fake: FakeSession) -> None:
    bounds = tree_bounds(fake)
    for name in STEPS:
        values = {getattr(c, name) for c in configs}
        low, high = getattr(bounds, name)
        assert len(values) >= 3, (name, values)
        assert all(low <= v <= high for v in values), (name, values)


def test_random_search_draws_every_knob_the_tree_moves():
    fake = FakeSession()
    _varies_every_knob(random_configs(fake, 200, seed=1), fake)


def test_tpe_asks_for_every_knob_the_tree_moves():
    fake = FakeSession()
    hpo.tpe(fake, budget=40, depth=1, seed=0)
    _varies_every_knob(fake.calls, fake)


def test_pbt_starts_from_and_explores_every_knob_the_tree_moves():
    fake = FakeSession()
    hpo.pbt(fake, budget=40, depth=5, seed=0)
    _varies_every_knob(fake.calls, fake)
    space = search_space(tree_bounds(fake))
    rng, start = random.Random(0), fake.default_config().model_copy(update={"beta": 0.01, "entropy_coef": 0.01})
    moved = {n for _ in range(50) for n, (a, b) in start.changed(space.perturb(start, rng, 0.0, (1.2, 0.8))).items()}
    assert moved == set(STEPS)


def _samples(cfg: StageConfig) -> int:
    return cfg.steps * cfg.prompts_per_step * cfg.num_generations


@pytest.mark.parametrize("method", ["random", "tpe", "pbt"])
def test_every_run_costs_at_most_the_default_s_samples_and_less_than_one_step_below(method):
    fake = FakeSession()
    base, depth = fake.default_config(), 2
    if method == "random":
        random_search(fake, Budget("samples", 8 * _samples(base)), depth, seed=3)
    elif method == "tpe":
        hpo.tpe(fake, budget=8, depth=depth, seed=3)
    else:
        hpo.pbt(fake, budget=8, depth=depth, seed=3)
    share = _samples(base) * (1 if method == "pbt" else depth)  # pbt trains one stage a round
    groups = {c.num_generations for c in fake.calls}
    assert len(groups) > 1
    for c in fake.calls:
        per_step = c.prompts_per_step * c.num_generations
        assert share - per_step < _samples(c) <= share, (c.num_generations, c.steps)


def test_matched_steps_price_samples_or_tokens():
    base = StageConfig(steps=12, prompts_per_step=8, num_generations=8, max_completion_length=10)
    wide = base.model_copy(update={"num_generations": 32, "max_completion_length": 20})
    assert matched_steps(wide, base, 12) == 3 and matched_steps(wide, base, 12, "tokens") == 1
    assert matched_steps(base.model_copy(update={"num_generations": 2}), base, 12) == 48
    assert matched_steps(wide, base, 1, "tokens") == 0


@pytest.mark.parametrize("method", ["random", "tpe", "pbt"])
def test_a_config_no_training_prompt_fits_is_drawn_again_not_trained(method):
    fake = FakeSession()
    if method == "random":
        random_search(fake, Budget("samples", 24 * _samples(fake.default_config())), 1, seed=0)
    elif method == "tpe":
        hpo.tpe(fake, budget=24, depth=1, seed=0)
    else:
        hpo.pbt(fake, budget=24, depth=3, seed=0)
    assert len(fake.calls) >= 24 - 1 and all(fake.trainable(c) for c in fake.calls)
    assert any(c.difficulty > 3 for c in fake.calls)  # the hard difficulties stay, with shorter completions


def test_a_session_knows_which_configs_have_prompts_that_fit(session):
    base = session.default_config()
    hard = session.task.max_difficulty
    room = session.max_len - max(len(session.vocab.encode(e.prompt))
                                 for e in session.task.dataset("train", 200, hard, seed=session.seed))
    assert session.trainable(base)
    assert session.trainable(base.model_copy(update={"difficulty": hard, "max_completion_length": max(1, room)}))
    assert not session.trainable(base.model_copy(update={"difficulty": hard, "max_completion_length": session.max_len}))
