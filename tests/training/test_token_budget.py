"""A token budget counts the tokens a stage actually generates: training stops between steps,
before the step whose most (every completion at its cap) could pass the allowance, so it never
passes it and stops within one step's most of it, however short the completions are."""

from __future__ import annotations

import pytest

from loopwise.training import session as session_module
from loopwise.training.compute import Allowance, Budget, Compute
from loopwise.training.config import StageConfig
from loopwise.training.grpo import GRPOTrainer
from loopwise.training.session import Session, stage_key

TINY = session_module.Preset("smoke", stage_steps=2, prompts_per_step=4, num_generations=4, eval_n=16, pool_n=120,
                             warm_max_steps=40, warm_check_every=20, probe_n=8)
CFG = StageConfig(steps=8, prompts_per_step=4, num_generations=4, max_completion_length=6)
STEP_CAP = 4 * 4 * 6  # one step of CFG, every completion at its cap


def test_the_stop_rule_lets_a_step_start_only_while_its_most_fits():
    allowance = Allowance(Budget("tokens", 1000), 300)
    short = [Compute(16, 40)] * 10  # completions of 2.5 tokens against a cap of 6
    n = allowance.steps_allowed(Compute(), CFG, short)
    assert n == 6  # 6 x 40 = 240 spent; a 7th could spend 96 more and pass 300
    assert 300 - STEP_CAP < 40 * n <= 300
    assert allowance.steps_allowed(Compute(), CFG, [Compute(16, 96)] * 10) == 3  # at the cap: 3 x 96
    assert allowance.steps_allowed(Compute(0, 250), CFG, short) == 0


def test_an_allowance_is_shared_cumulatively():
    whole = Allowance(Budget("tokens", 1000), 1100)
    assert [whole.share(Compute(0, 100), i, 3).ceiling for i in range(3)] == [433, 766, 1100]


def test_expected_lengths_price_a_token_stage_and_leave_samples_alone():
    tokens, samples = Budget("tokens", 1000), Budget("samples", 1000)
    assert tokens.stage_cost(CFG) == 8 * STEP_CAP
    assert tokens.stage_cost(CFG, length=2.5) == 8 * 16 * 2.5
    assert tokens.stage_cost(CFG, length=9.0) == 8 * STEP_CAP  # never above the cap
    assert samples.stage_cost(CFG, length=2.5) == samples.stage_cost(CFG) == 8 * 16
    assert tokens.stages(CFG, length=2.5) == 1000 // 320


def test_a_trainer_stops_between_steps_when_told():
    from tests.training.test_grpo import TASK, VOCAB, _policy, _pool

    trainer = GRPOTrainer(_policy(), VOCAB, TASK, CFG.model_copy(update={"max_completion_length": 3}), _pool(20, 1))
    seen = []
    trace = trainer.run(stop=lambda rows: seen.append(len(rows)) or len(rows) >= 2)
    assert len(trace) == trainer.step_count == 2 and seen == [0, 1, 2]


@pytest.fixture(scope="module")
def base():
    """A warm-started TINY arithmetic session's base (its weights and warm-start record)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(session_module.PRESETS, "smoke", TINY)
        s = Session("arithmetic", "smoke", difficulty=0)
        s.prepare()
        yield s.base_state, s.base_tune, s.warm


@pytest.fixture
def session(base, monkeypatch):
    monkeypatch.setitem(session_module.PRESETS, "smoke", TINY)
    s = Session("arithmetic", "smoke", difficulty=0)
    s.load_base(*base)
    return s


def _held(session: Session, ceiling: int) -> Allowance:
    session.allowance = Allowance(Budget("tokens", ceiling), ceiling)
    return session.allowance


def test_the_base_records_its_expected_completion_length(session):
    assert 1.0 <= session.base_length <= session.default_config().max_completion_length


def test_a_stage_is_cut_before_a_step_that_could_pass_the_allowance_and_kept_as_the_steps_it_ran(session):
    cfg = session.default_config().model_copy(update={"steps": 40})
    cap = Budget("tokens", 1).stage_cost(cfg, steps=1)
    recorded = []
    session.record = lambda key, result, label: recorded.append(key)
    _held(session, 3 * cap)
    result = session.run_stage(session.base_state, cfg, seed=5)
    ran = [row for row in result.trace if "reward" in row]
    assert 3 * cap - cap < session.spent.tokens <= 3 * cap
    assert 3 <= result.config.steps == len(ran) < 40  # shorter completions than the cap buy more steps
    # the cut stage (its steps, and the steps it was planned with), not the one asked for
    assert recorded == [stage_key(session.base_state, result.config, 5, planned=40)]
    # asked again (a resumed run: its cache holds the cut stage), it is trained and cut at the same
    # step, and not recorded a second time
    session.spent = Compute()
    again = session.run_stage(session.base_state, cfg, seed=5)
    assert again.config == result.config and again.state == result.state
    assert recorded == [stage_key(session.base_state, result.config, 5, planned=40)]


def test_a_cut_stage_does_not_stand_in_for_a_stage_asked_for_with_the_steps_it_ran(session):
    """A stage cut after n of its steps probed greedy reward on the schedule of its planned length;
    a stage asked for with n steps probes on its own schedule. The training is the same, the traces
    are not, so the cut one is kept apart (and says what it was planned for)."""
    import math

    from loopwise.training.metrics import GREEDY_REWARD
    from loopwise.training.session import PROBE_POINTS

    cfg = session.default_config().model_copy(update={"steps": 40})
    labels = []
    session.record = lambda key, result, label: labels.append(label)
    _held(session, 3 * Budget("tokens", 1).stage_cost(cfg, steps=1))
    cut = session.run_stage(session.base_state, cfg, seed=5)
    n = cut.config.steps
    assert n < 40 and labels == [{"planned_steps": 40}]
    session.allowance = None
    fresh = session.run_stage(session.base_state, cfg.model_copy(update={"steps": n}), seed=5)
    every = math.ceil(n / PROBE_POINTS)
    assert fresh.state == cut.state  # the probes do not touch the training
    assert [r["step"] for r in fresh.trace if GREEDY_REWARD in r] == [k for k in range(1, n + 1)
                                                                      if k % every == 0 or k == n]
    assert len(labels) == 2 and labels[1] == {}  # trained and recorded as a stage of its own


def test_a_cached_stage_the_allowance_would_cut_is_trained_again_and_cut(session):
    cfg = session.default_config().model_copy(update={"steps": 6})
    whole = session.run_stage(session.base_state, cfg, seed=3)
    spent = session.spent.tokens
    session.spent = Compute()
    _held(session, spent - 1)
    cut = session.run_stage(session.base_state, cfg, seed=3)
    assert cut.config.steps < 6 and cut.state != whole.state and session.spent.tokens < spent


def test_a_run_to_its_allowance_trains_past_its_steps_until_the_allowance_stops_it(session):
    cfg = session.default_config()
    cap = Budget("tokens", 1).stage_cost(cfg, steps=1)
    _held(session, 6 * cap)
    result = session.run_stage(session.base_state, cfg, seed=1, steps=2, to_allowance=True)
    assert result.config.steps > 2 and 5 * cap < session.spent.tokens <= 6 * cap


def test_a_run_whose_share_has_no_room_for_a_step_is_left_out_with_a_note(session):
    from loopwise.training.baselines import continuous

    small = session.default_config()
    large = small.model_copy(update={"num_generations": 4 * small.num_generations})  # a step 4x the cost
    cap = Budget("tokens", 1).stage_cost(small, steps=1)
    _held(session, 6 * cap)  # a third each: room for a step of `small`, not of `large`
    picked = continuous(session, 3, 1, 0, [small, large, small], "grid")
    assert [n for n in picked.notes if "left out" in n] == [
        f"run 1 left out: one step of {4 * small.prompts_per_step * small.num_generations} completions of up "
        f"to {small.max_completion_length} tokens does not fit its share (the budget)"]
    assert picked.stages_used == 2
