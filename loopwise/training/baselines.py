"""The baselines the tree search is compared with: fixed, staged, grid and random schedules.

Each is held to the same compute budget as the tree (see :mod:`loopwise.training.search`).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

from loopwise.errors import UserError
from loopwise.training.compute import BUDGET_NOTE, Budget
from loopwise.training.config import StageConfig
from loopwise.training.session import Schedule, Session, tree_bounds

def staged(session: Session, budget: int, depth: int, seed: int = 0, configs: Sequence[StageConfig] | None = None,
           method: str = "staged") -> Schedule:
    """``configs`` (default: the default config ``depth`` times) as stages, repeated with new seeds
    while budget is left: ``budget`` stages, or under the session's allowance (a token budget)
    while a step fits it, the last repetition then ending where the allowance cuts it (its tuning
    reward is that of the shorter schedule, and a note says so); the best repetition by tuning reward."""
    configs = list(configs or [session.default_config()] * depth)
    held = session.allowance is not None
    best, used, rep, notes = None, 0, 0, []
    while (session.room(configs[0]) if held else used + len(configs) <= budget):
        ran, state, tune, traces = _repetition(session, configs, seed, rep)
        used += len(ran)
        if len(ran) < len(configs) or ran[-1].steps < configs[len(ran) - 1].steps:
            notes.append(f"repetition {rep} ended after {sum(c.steps for c in ran)} of "
                         f"{sum(c.steps for c in configs)} steps {BUDGET_NOTE}")
        if best is None or tune > best.tune_reward:
            best, best_rep = Schedule(method, ran, tune, state, 0, traces=traces), rep
        rep += 1
    if best is None:
        raise UserError(f"a budget of {budget} stages is less than one {method} schedule of {len(configs)}")
    best.stages_used, best.notes = used, notes + ([f"the best is repetition {best_rep}"] if held else [])
    return best


def _repetition(session: Session, configs: list[StageConfig], seed: int, rep: int):
    """One repetition of ``configs`` from the base: the configs it ran (a stage the allowance cut
    short ends it), its weights, tuning reward and traces."""
    state, ran, traces, tune = session.base_state, [], [], session.base_tune
    for i, cfg in enumerate(configs):
        if not session.room(cfg):
            break
        result = session.run_stage(state, cfg, seed * 1000 + rep * 100 + i, label={"rep": rep, "stage": i})
        state, tune = result.state, result.tune_reward
        ran.append(result.config)
        traces.append(result.trace)
        if result.config.steps < cfg.steps:
            break
    return ran, state, tune, traces


def continuous(session: Session, budget: int, depth: int, seed: int = 0, configs: Sequence[StageConfig] | None = None,
               method: str = "fixed") -> Schedule:
    """Each config trained without a break for ``depth`` stages' worth of steps (one trainer), as
    many configs as the budget allows (``budget // depth``); the best by tuning reward. Under the
    session's allowance (a token budget) the runs share what it leaves equally: each trains until
    its cumulative share stops it, past its steps or short of them (a run whose share has no room
    for one step is left out)."""
    configs = list(configs or [session.default_config()] * max(1, budget // depth))
    whole, start = session.allowance, session.spent
    best, used, left_out = None, 0, []
    for i, cfg in enumerate(configs):
        if used + depth > budget:
            break
        with session.held_to(whole and whole.share(start, i, len(configs))):
            if not session.room(cfg):
                left_out.append(f"run {i} left out: one step of {cfg.prompts_per_step * cfg.num_generations} "
                                f"completions of up to {cfg.max_completion_length} tokens does not fit its share "
                                f"{BUDGET_NOTE}")
                continue
            result = session.run_stage(session.base_state, cfg, seed * 1000 + i, steps=cfg.steps * depth,
                                       label={"rep": i, "stage": 0}, to_allowance=whole is not None)
        used += depth
        if best is None or result.tune_reward > best.tune_reward:
            best = Schedule(method, [result.config], result.tune_reward, result.state, 0, traces=[result.trace])
    if best is None:
        raise UserError(f"a budget of {budget} stages is less than one {method} run of {depth}")
    best.stages_used = used
    best.notes += left_out
    return best


def grid_levels(session: Session) -> dict[str, tuple]:
    """Each knob the tree's transitions move (:data:`~loopwise.training.transitions.STEPS`) at the
    default config's value and one transition step down and up, within the tree's bounds
    (:func:`tree_bounds`); a level that falls outside them, or repeats another, is left out."""
    from loopwise.training.transitions import STEPS

    base, bounds = session.default_config(), tree_bounds(session)
    levels = {}
    for knob, step in STEPS.items():
        value = getattr(base, knob)
        moved = [bounds.limit(knob, value, step.move(value, d)) for d in ("down", "up")]
        levels[knob] = tuple(dict.fromkeys([value, *moved]))
    return levels


def grid_configs(session: Session, n: int, seed: int = 0) -> list[StageConfig]:
    """``n`` points of :func:`grid_levels`: the whole product when it has at most ``n`` points,
    else a Latin hypercube over the levels (each knob's levels used equally often, plus or minus
    one, paired across knobs by a permutation seeded with ``seed``). Points the config rejects
    (a lopsided clip range) are left out."""
    levels = grid_levels(session)
    base, rng = session.default_config(), random.Random(f"grid:{seed}")
    if math.prod(len(v) for v in levels.values()) <= n:
        points = [dict(zip(levels, values)) for values in itertools.product(*levels.values())]
    else:
        columns = {}
        for knob, values in levels.items():
            order = list(values)
            rng.shuffle(order)
            column = [order[i % len(order)] for i in range(n)]
            rng.shuffle(column)
            columns[knob] = column
        points = [{k: columns[k][i] for k in levels} for i in range(n)]
    out = []
    for p in points:
        try:
            out.append(StageConfig(**(base.model_dump() | p)))
        except ValueError:
            continue
    return out


def grid(session: Session, budget: Budget, depth: int, seed: int = 0) -> Schedule:
    """The grid's points, as many as the budget buys default runs of ``depth`` stages, each trained
    continuously (one trainer) on an equal share of the budget: its steps are the most whose cost
    fits the share."""
    n = max(1, budget.stages(session.default_config(), length=session.base_length) // depth)
    share = budget.amount // n
    runs, notes = [], []
    for i, cfg in enumerate(grid_configs(session, n, seed)):
        steps = share // budget.stage_cost(cfg, steps=1, length=session.base_length)
        if steps >= 1:
            runs.append(cfg.model_copy(update={"steps": steps}))
        else:
            notes.append(f"point {i} left out: one step of {cfg.prompts_per_step * cfg.num_generations} completions "
                         f"costs more than its share of {share:,} {budget.unit} {BUDGET_NOTE}")
    if not runs:
        raise UserError(f"a budget of {budget.amount} {budget.unit} buys no step of any grid point")
    before = session.trained
    schedule = continuous(session, len(runs), 1, seed, runs, "grid")
    # the steps its points trained (a token budget's runs train to their shares), in default stages
    schedule.stages_used = max(1, round((session.trained - before).steps / session.p.stage_steps))
    schedule.notes += notes
    return schedule


def random_configs(session: Session, n: int, seed: int = 0, fits=None) -> list[StageConfig]:
    """``n`` configs drawn from the search space every tuning baseline shares with the tree: each
    knob its transitions move, over its ranges (:func:`~loopwise.training.space.search_space`).
    ``fits`` (a config -> bool, default all): draws it rejects are drawn again (a group too large
    for one step of a run's budget, completions too long for the difficulty's prompts);
    :data:`~loopwise.training.space.MAX_DRAWS` rejections in a row are a :class:`UserError`."""
    from loopwise.training.space import MAX_DRAWS, search_space

    rng, space, base = random.Random(seed), search_space(tree_bounds(session)), session.default_config()
    out, misses = [], 0
    while len(out) < n:
        cfg = space.sample(base, rng)
        if fits is None or fits(cfg):
            out.append(cfg)
            misses = 0
        elif (misses := misses + 1) >= MAX_DRAWS:
            raise UserError(f"{MAX_DRAWS} random configs in a row cost more than a run's budget buys or leave "
                            "no training prompt room for their completions")
    return out


def random_search(session: Session, budget: Budget, depth: int, seed: int = 0) -> Schedule:
    """As many random configs as the budget buys default runs of ``depth`` stages, each trained
    continuously (one trainer) for the steps that cost what ``depth`` default stages cost
    (:func:`~loopwise.training.space.matched_steps`: a larger group trains fewer steps). A config
    of which not one step fits (in a token budget: at its cap, in a run's share), or whose
    completions leave no training prompt room
    (:meth:`~loopwise.training.session.Session.trainable`), is drawn again."""
    from loopwise.training.space import matched_steps

    base = session.default_config()
    n = budget.stages(base, length=session.base_length) // depth
    if n < 1:
        raise UserError(f"a budget of {budget.amount} {budget.unit} is less than one random run of {depth} stages")
    def steps(cfg: StageConfig) -> int:
        return matched_steps(cfg, base, base.steps * depth, budget.unit, session.base_length)

    whole, start = session.allowance, session.spent

    def fits(cfg: StageConfig) -> bool:
        return steps(cfg) >= 1 and session.trainable(cfg) and (whole is None or whole.share_fits(start, n, cfg))

    runs = [cfg.model_copy(update={"steps": steps(cfg)}) for cfg in random_configs(session, n, seed, fits=fits)]
    schedule = continuous(session, len(runs), 1, seed, runs, "random")
    schedule.stages_used *= depth  # the runs it trained (one whose share had no room for a step is left out)
    return schedule
