"""TPE and PBT baselines against a fake session: no policy is trained. A stage's reward is a known
function of its config, peaked at learning rate 3e-4 and temperature 1.0, added to the reward held
in its parent's "weights" (JSON that also lists the seeds of every stage behind them), so which
weights a stage started from is visible in its result. Their search space (every knob the tree
moves) is tested in test_space.py."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from loopwise.errors import UserError
from loopwise.training import hpo
from loopwise.training.compute import Compute
from loopwise.training.config import StageConfig
from loopwise.training.baselines import random_configs
from loopwise.training.session import RANDOM_LEARNING_RATE, StageResult, tree_bounds
from loopwise.training.space import search_space

STEPS = 5


def quality(cfg: StageConfig) -> float:
    return 1.0 - 4 * math.log10(cfg.learning_rate / 3e-4) ** 2 - ((cfg.temperature - 1.0) / 0.5) ** 2 - cfg.beta


@dataclass
class Call:
    parent: dict
    config: StageConfig
    seed: int
    steps: int | None
    label: dict
    state: bytes
    tune: float


class FakeSession:
    def __init__(self, learning_rate_range: tuple[float, float] = RANDOM_LEARNING_RATE) -> None:
        self.learning_rate_range = learning_rate_range
        self.base_state = json.dumps({"reward": 0.0, "seeds": []}).encode()
        self.task = SimpleNamespace(max_difficulty=4)
        self.tune, self.max_len = [SimpleNamespace(prompt="12+34=")], 60
        self.calls: list[Call] = []
        self.optuna_verbosity: list[int] = []
        self.allowance, self.base_length, self.spent = None, None, Compute()  # a sample budget's session

    def held_to(self, allowance):
        assert allowance is None
        return contextlib.nullcontext()

    def room(self, config: StageConfig) -> bool:
        return True

    def default_config(self) -> StageConfig:
        return StageConfig(steps=STEPS, beta=0.0)

    def trainable(self, config: StageConfig) -> bool:
        return True

    def prompt_tokens(self, prompt: str) -> int:
        return len(prompt)

    def run_stage(self, parent, config, seed, steps=None, label=None, to_allowance=False) -> StageResult:
        if steps is not None:
            config = config.model_copy(update={"steps": steps})
        before = json.loads(parent)
        reward = before["reward"] + quality(config)
        state = json.dumps({"reward": reward, "seeds": before["seeds"] + [seed]}).encode()
        self.calls.append(Call(before, config, seed, steps, dict(label or {}), state, reward))
        if "optuna" in sys.modules and sys.modules["optuna"] is not None:
            self.optuna_verbosity.append(sys.modules["optuna"].logging.get_verbosity())
        return StageResult(config, state, [{"step": config.steps, "seed": seed}], reward, reward, 0.0)


SPACE = search_space(tree_bounds(FakeSession()))
KNOBS = SPACE.names()
CONTINUOUS = [k for k in KNOBS if not SPACE.knobs[k].integer]


def in_space(cfg: StageConfig) -> bool:
    return all((k.off and getattr(cfg, n) == 0) or k.low <= getattr(cfg, n) <= k.high for n, k in SPACE.knobs.items())


def default_samples(stages: int) -> int:
    base = FakeSession().default_config()
    return stages * base.steps * base.prompts_per_step * base.num_generations


def samples(cfg: StageConfig) -> int:
    return cfg.steps * cfg.prompts_per_step * cfg.num_generations


def trace_of(schedule) -> list:
    return [(c.model_dump(), c_tr) for c, c_tr in zip(schedule.configs, schedule.traces)]


def test_the_search_space_is_the_random_baselines():
    configs = random_configs(FakeSession(), 300, seed=3)
    assert all(in_space(c) for c in configs)
    assert {c.beta == 0.0 for c in configs} == {True, False}


# -- TPE -------------------------------------------------------------------------------------
def test_tpe_spends_whole_trials_within_the_budget():
    session = FakeSession()
    schedule = hpo.tpe(session, budget=11, depth=3, seed=0)
    assert schedule.method == "tpe" and schedule.stages_used == 9 and len(session.calls) == 3
    assert all(samples(c.config) <= default_samples(3) and c.parent == {"reward": 0.0, "seeds": []}
               for c in session.calls)
    assert [c.seed for c in session.calls] == [0, 1, 2]
    assert [c.label for c in session.calls] == [{"rep": i, "stage": 0} for i in range(3)]
    best = max(session.calls, key=lambda c: c.tune)
    assert schedule.tune_reward == best.tune and schedule.state == best.state
    assert [c.model_dump() for c in schedule.configs] == [best.config.model_dump()]


def test_tpe_is_deterministic_per_seed():
    runs = {}
    for seed in (0, 0, 1):
        session = FakeSession()
        schedule = hpo.tpe(session, budget=24, depth=2, seed=seed)
        runs.setdefault(seed, []).append(([c.config.model_dump() for c in session.calls], trace_of(schedule)))
    assert runs[0][0] == runs[0][1]
    assert runs[0][0][0] != runs[1][0][0]


@pytest.mark.parametrize("seed", range(5))
def test_tpe_improves_on_its_random_start(seed):
    session = FakeSession()
    schedule = hpo.tpe(session, budget=60, depth=2, seed=seed)  # 30 trials, the first 10 random
    rewards = [c.tune for c in session.calls]
    assert schedule.stages_used == 60 and schedule.tune_reward == max(rewards)
    assert schedule.tune_reward > rewards[0]
    assert max(rewards[10:]) > max(rewards[:10])  # the modelled trials beat every random one
    assert schedule.tune_reward > 0.93  # the peak is 1.0; three of the space's nine knobs matter here


def test_tpe_configs_stay_in_the_search_space():
    session = FakeSession()
    hpo.tpe(session, budget=40, depth=1, seed=2)
    configs = [c.config for c in session.calls]
    assert all(in_space(c) for c in configs)
    assert {c.beta == 0.0 for c in configs} == {True, False}  # the KL switch takes both values
    other = {k: v for k, v in configs[0].model_dump().items() if k not in KNOBS and k != "steps"}
    assert other == FakeSession().default_config().model_dump(exclude={*KNOBS, "steps"})


def test_tpe_quiets_optunas_logger_only_while_it_runs():
    import optuna

    before, root = optuna.logging.get_verbosity(), logging.getLogger().level
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        session = FakeSession()
        hpo.tpe(session, budget=3, depth=1)
        assert set(session.optuna_verbosity) == {optuna.logging.WARNING}
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
        assert logging.getLogger().level == root
    finally:
        optuna.logging.set_verbosity(before)


def test_tpe_without_optuna_is_a_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(UserError) as err:
        hpo.tpe(FakeSession(), budget=4, depth=2)
    assert str(err.value) == "optuna is not installed: pip install 'loopwise[training]'"


# -- PBT -------------------------------------------------------------------------------------
@pytest.mark.parametrize("budget,depth,population,size", [(13, 3, None, 4), (13, 3, 10, 4), (13, 3, 2, 2),
                                                          (5, 3, None, 1), (6, 3, None, 2)])
def test_pbt_spends_population_times_depth_within_the_budget(budget, depth, population, size):
    session = FakeSession()
    schedule = hpo.pbt(session, budget, depth, seed=1, population=population)
    assert schedule.method == "pbt" and schedule.stages_used == size * depth <= budget
    assert len(session.calls) == size * depth
    assert all(default_samples(1) - c.config.prompts_per_step * c.config.num_generations < samples(c.config)
               <= default_samples(1) for c in session.calls)
    assert [c.label for c in session.calls] == [{"rep": m, "stage": r} for r in range(depth) for m in range(size)]
    assert [c.seed for c in session.calls] == [1000 + r * 100 + m for r in range(depth) for m in range(size)]
    exploits = [line for line in schedule.notes if line.startswith("round ")]
    assert len(exploits) == (depth - 1) * hpo.quantile_size(size)  # none after the last round


def _rounds(session: FakeSession, size: int) -> list[list[Call]]:
    return [session.calls[i:i + size] for i in range(0, len(session.calls), size)]


def _donor(call: Call) -> int:
    """The member whose stage produced the weights ``call`` started from."""
    return call.parent["seeds"][-1] % 100


@pytest.mark.parametrize("seed", range(3))
def test_pbt_bottom_members_take_top_members_weights(seed):
    size = 8
    session = FakeSession()
    hpo.pbt(session, budget=40, depth=5, seed=seed)
    assert [c.config.model_copy(update={"steps": STEPS}) for c in session.calls[:size]] == \
        random_configs(session, size, seed)
    n = hpo.quantile_size(size)
    assert n == 2
    for before, after in zip(_rounds(session, size), _rounds(session, size)[1:]):
        ranked = sorted(range(size), key=lambda m: before[m].tune)
        bottom, top = set(ranked[:n]), set(ranked[-n:])
        for m, call in enumerate(after):
            if m in bottom:
                assert _donor(call) in top and call.parent["reward"] == before[_donor(call)].tune
            else:  # the rest keep their weights and their config
                assert _donor(call) == m and call.parent == json.loads(before[m].state)
                assert call.config == before[m].config


def _perturbed(knob: str, old: float, new: float, factors=hpo.PERTURBATION_FACTORS) -> bool:
    return any(math.isclose(new, SPACE.knobs[knob].perturb(old, f), rel_tol=1e-12) for f in factors)


def test_pbt_perturbs_by_the_factors_without_resampling():
    size = 8
    session = FakeSession()
    hpo.pbt(session, budget=40, depth=5, seed=0, resample_probability=0.0)
    changed = 0
    for before, after in zip(_rounds(session, size), _rounds(session, size)[1:]):
        for call in after:
            old, new = before[_donor(call)].config, call.config
            if new != old:
                changed += 1
                assert all(_perturbed(k, getattr(old, k), getattr(new, k)) for k in KNOBS)
                assert {k: v for k, v in new.model_dump().items() if k not in KNOBS and k != "steps"} == \
                    {k: v for k, v in old.model_dump().items() if k not in KNOBS and k != "steps"}
            assert in_space(new)
    assert changed == 4 * hpo.quantile_size(size)


def test_explore_resamples_a_quarter_of_the_knobs_and_stays_in_range():
    rng = random.Random(0)
    middle = StageConfig(learning_rate=3e-4, beta=0.02, entropy_coef=0.01, temperature=0.95)
    resampled = 0
    for _ in range(2000):
        new = hpo.explore(middle, rng, SPACE)
        assert in_space(new)
        # a resampled integer may land on a perturbed value: the continuous knobs count
        resampled += sum(not _perturbed(k, getattr(middle, k), getattr(new, k)) for k in CONTINUOUS)
    assert abs(resampled / (len(CONTINUOUS) * 2000) - hpo.RESAMPLE_PROBABILITY) < 0.03


def _one_of(value: float, options: tuple[float, ...]) -> bool:
    return any(math.isclose(value, o, rel_tol=1e-12) for o in options)


def test_explore_clamps_to_the_range_and_keeps_kl_off():
    rng = random.Random(1)
    for _ in range(50):
        top = {n: k.high for n, k in SPACE.knobs.items()}
        bottom = {n: k.low for n, k in SPACE.knobs.items()} | {"beta": 0.0, "entropy_coef": 0.0}
        high = hpo.explore(StageConfig(**top), rng, SPACE, resample_probability=0.0)
        low = hpo.explore(StageConfig(**bottom), rng, SPACE, resample_probability=0.0)
        lr, temp = SPACE.knobs["learning_rate"], SPACE.knobs["temperature"]
        assert _one_of(high.learning_rate, (lr.high, lr.high * 0.8)) and _one_of(high.temperature, (temp.high, temp.high * 0.8))
        assert _one_of(high.beta, (SPACE.knobs["beta"].high, SPACE.knobs["beta"].high * 0.8))
        assert _one_of(low.learning_rate, (lr.low, lr.low * 1.2)) and _one_of(low.temperature, (temp.low, temp.low * 1.2))
        assert low.beta == 0.0 and low.entropy_coef == 0.0
        assert high.num_generations in (SPACE.knobs["num_generations"].high, round(SPACE.knobs["num_generations"].high * 0.8))


@pytest.mark.parametrize("population,n", [(1, 0), (2, 1), (3, 1), (4, 1), (5, 2), (8, 2), (9, 3), (10, 3)])
def test_quantiles_round_up_to_at_most_half(population, n):
    assert hpo.quantile_size(population) == n


def test_pbt_winner_is_the_lineage_of_its_weights():
    depth, inherited = 4, 0
    for seed in range(6):
        session = FakeSession()
        schedule = hpo.pbt(session, budget=24, depth=depth, seed=seed)
        winner = max(session.calls[-6:], key=lambda c: c.tune)
        assert schedule.tune_reward == winner.tune and schedule.state == winner.state
        by_seed = {c.seed: c for c in session.calls}
        lineage = [by_seed[s] for s in json.loads(winner.state)["seeds"]]
        assert len(schedule.configs) == len(schedule.traces) == depth == len(lineage)
        assert schedule.configs == [c.config for c in lineage]
        assert schedule.traces == [[{"step": c.config.steps, "seed": c.seed}] for c in lineage]
        inherited += any(c.seed % 100 != winner.seed % 100 for c in lineage)
    assert inherited > 0  # some winners carry stages other members trained


def test_pbt_paths_are_every_lineage_of_weights_from_the_default_config():
    """Every member's lineage (what its weights were trained with, inherited stages included) is a
    path for the knob directions: a replaced member's up to the round it was replaced in, each
    survivor's to the end; each starts at the default config, as the tree's paths do."""
    depth, size = 4, 6
    session = FakeSession()
    schedule = hpo.pbt(session, budget=24, depth=depth, seed=1)
    n = hpo.quantile_size(size)
    assert len(schedule.paths) == size + n * (depth - 1)
    base = session.default_config()
    for path in schedule.paths:
        assert path[0] == base and 2 <= len(path) <= depth + 1
    by_seed = {c.seed: c for c in session.calls}
    parents = [json.dumps(c.parent) for c in session.calls]
    ended = [c for c in session.calls if c.state.decode() not in parents]  # weights nothing trained on
    lineages = [[base] + [by_seed[s].config for s in json.loads(c.state)["seeds"]] for c in ended]
    assert sorted(map(repr, schedule.paths)) == sorted(map(repr, lineages))
    assert [base] + schedule.configs in schedule.paths


def test_pbt_is_deterministic_per_seed():
    results = []
    for seed in (3, 3, 4):
        session = FakeSession()
        schedule = hpo.pbt(session, budget=30, depth=5, seed=seed)
        results.append(([c.config.model_dump() for c in session.calls], trace_of(schedule), schedule.notes))
    assert results[0] == results[1] and results[0] != results[2]


@pytest.mark.parametrize("seed", range(4))
def test_pbt_moves_the_population_towards_the_peak(seed):
    session = FakeSession()
    hpo.pbt(session, budget=48, depth=6, seed=seed)
    rounds = _rounds(session, 8)
    mean = [sum(quality(c.config) for c in r) / len(r) for r in rounds]
    assert mean[-1] > mean[0]


# -- mistakes --------------------------------------------------------------------------------
@pytest.mark.parametrize("method", [hpo.tpe, hpo.pbt])
@pytest.mark.parametrize("budget,depth", [(2, 3), (0, 1), (4, 0)])
def test_a_budget_below_one_run_is_a_one_line_error(method, budget, depth):
    session = FakeSession()
    with pytest.raises(UserError) as err:
        method(session, budget, depth)
    assert "\n" not in str(err.value) and session.calls == []


def test_pbt_rejects_an_empty_population_and_a_quantile_above_half():
    with pytest.raises(UserError, match="population"):
        hpo.pbt(FakeSession(), 6, 2, population=0)
    with pytest.raises(UserError, match="quantile_fraction"):
        hpo.pbt(FakeSession(), 6, 2, quantile_fraction=0.6)


def test_a_session_learning_rate_range_moves_every_baselines_draws():
    """A pretrained model's preset names a learning rate far below a from-scratch policy's; random
    search, TPE and PBT then draw from the tree's range around it (a tenth of its low end to three
    times its high end), never from the character policies' one."""
    pytest.importorskip("optuna")
    session = FakeSession((1e-6, 1e-5))
    low, high = 1e-7, 3e-5
    assert all(low <= c.learning_rate <= high for c in random_configs(session, 50, seed=1))
    hpo.tpe(session, budget=12, depth=1, seed=0, startup_trials=4)
    hpo.pbt(session, budget=24, depth=3, seed=0)
    assert session.calls and all(low <= c.config.learning_rate <= high for c in session.calls)


def test_a_preset_with_a_learning_rate_scales_the_range_and_the_trees_bounds(monkeypatch):
    from loopwise.training import session as session_module
    from loopwise.training.session import Session, tree_bounds

    plain = Session("arithmetic", "smoke")
    assert plain.learning_rate_range == RANDOM_LEARNING_RATE == (1e-4, 1e-3)
    assert tree_bounds(plain).learning_rate == (1e-5, 3e-3)
    preset = session_module.PRESETS["smoke"]
    monkeypatch.setitem(session_module.PRESETS, "smoke", session_module.Preset(
        **{**preset.__dict__, "learning_rate": 2e-6}))
    tuned = Session("arithmetic", "smoke")
    assert tuned.default_config().learning_rate == 2e-6
    assert tuned.learning_rate_range == pytest.approx((2e-6, 2e-5))
    assert tree_bounds(tuned).learning_rate == pytest.approx((2e-7, 6e-5))
