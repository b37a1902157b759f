"""Hyperparameter-optimization baselines for the stage-schedule comparison: TPE and PBT.

Both spend whole stages from the same warm-started base as the methods of
:mod:`loopwise.training.search`; their ``budget`` is the number of default stages a method's
compute budget buys (:func:`~loopwise.training.search.run_method`). They search the space the
``random`` baseline draws from (:mod:`loopwise.training.space`): every knob the tree's transitions
move, over the tree's ranges. A config with another group size (or, in a token budget, completion
length) trains the steps that cost what the default's do (:func:`~loopwise.training.space.matched_steps`),
so a run spends the samples of the default stages it stands for. In a token budget each run
trains until its equal cumulative share of the budget stops it (the session's allowance); its
steps, priced at the base's expected completion length, are then what it plans.

- :func:`tpe`: Optuna's TPE through ask/tell, one config per trial, each trained like the ``random``
  baseline's (one trainer for ``depth`` stages' worth of samples), objective = tuning reward.
- :func:`pbt`: population-based training with stages as the perturbation interval: every member
  trains one stage per round; between rounds the bottom quantile takes the weights and config of a
  top member and perturbs the config (Ray Tune's exploit/explore, defaults in FACTS.md §8).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from loopwise.errors import UserError
from loopwise.training.config import StageConfig
from loopwise.training.baselines import random_configs
from loopwise.training.session import Schedule, Session, tree_bounds
from loopwise.training.space import MAX_DRAWS, SearchSpace, matched_steps, search_space

# Ray Tune's PopulationBasedTraining defaults (FACTS.md §8, "PBT (Ray Tune)").
QUANTILE_FRACTION = 0.25
RESAMPLE_PROBABILITY = 0.25
PERTURBATION_FACTORS = (1.2, 0.8)

OPTUNA_MISSING = "optuna is not installed: pip install 'loopwise[training]'"


def _score(tune: float) -> float:
    """A reward as a sort key: NaN (a failed evaluation) ranks below everything."""
    return -math.inf if math.isnan(tune) else tune


def _runs_that_fit(budget: int, depth: int, method: str) -> int:
    if depth < 1:
        raise UserError(f"a {method} schedule needs a depth of at least 1 stage, not {depth}")
    if budget < depth:
        raise UserError(f"a budget of {budget} stages is less than one {method} run of {depth}")
    return budget // depth


# -- TPE -------------------------------------------------------------------------------------
def _import_optuna():
    try:
        import optuna
    except ImportError:
        raise UserError(OPTUNA_MISSING) from None
    return optuna


def tpe(session: Session, budget: int, depth: int, seed: int = 0, *, startup_trials: int = 10,
        unit: str = "samples") -> Schedule:
    """Optuna's TPE over the search space, ``budget // depth`` trials through ask/tell.

    Trial ``i`` asks one config (:meth:`~loopwise.training.space.SearchSpace.suggest`), trains it
    from the base without a break for the steps that cost what ``depth`` default stages cost in
    ``unit`` (seed ``seed * 1000 + i``, exactly as the ``random`` baseline trains its configs) and
    tells the study its tuning reward; a config of which not one step fits, or that leaves no training
    prompt room for its completions (``session.trainable``), is told as failed and asked again. The sampler is
    ``TPESampler(seed=seed, n_startup_trials=startup_trials)``: its first ``startup_trials``
    trials (Optuna's default, 10) are random draws, so with the default a budget of at most 10
    trials is random search with Optuna's generator.

    Args:
        session: The base and evaluation sets every method shares.
        budget: Stages the method may spend; it spends ``depth`` per trial.
        depth: Stages' worth of steps each trial trains.
        seed: Seeds the sampler and the training runs; the same seed gives the same schedule.
        startup_trials: Random trials before TPE models the results (``n_startup_trials``).
        unit: What a run's cost is matched in: ``samples`` or ``tokens``.

    Returns:
        The best trial by tuning reward (earliest on ties): its config with the run's length as
        ``steps``, with ``stages_used = trials * depth``.

    Raises:
        UserError: optuna is missing, or the budget is less than one trial.
    """
    optuna = _import_optuna()
    trials = _runs_that_fit(budget, depth, "tpe")
    base, space = session.default_config(), _space(session)
    whole, start = session.allowance, session.spent  # a token budget: each trial trains to its share
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # optuna's own logger only: a line per trial otherwise
    try:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        best, best_trial = None, 0
        for i in range(trials):
            for _ in range(MAX_DRAWS):
                trial = study.ask()
                cfg = space.suggest(base, trial)
                steps = matched_steps(cfg, base, base.steps * depth, unit, session.base_length)
                if steps >= 1 and session.trainable(cfg) and (whole is None or whole.share_fits(start, trials, cfg)):
                    break
                study.tell(trial, state=optuna.trial.TrialState.FAIL)  # asked again: not a trial spent
            else:
                raise UserError(f"{MAX_DRAWS} tpe configs in a row cost more than a run's budget buys or leave no "
                                "training prompt room for their completions")
            with session.held_to(whole and whole.share(start, i, trials)):
                result = session.run_stage(session.base_state, cfg, seed * 1000 + i, steps=steps,
                                           label={"rep": i, "stage": 0}, to_allowance=whole is not None)
            study.tell(trial, result.tune_reward)
            if best is None or _score(result.tune_reward) > _score(best.tune_reward):
                best, best_trial = Schedule("tpe", [result.config],
                                            result.tune_reward, result.state, 0, traces=[result.trace]), i
    finally:
        optuna.logging.set_verbosity(previous)
    best.stages_used = trials * depth
    best.notes.append(f"{trials} trials of {depth} stages; the best is trial {best_trial}")
    return best


# -- PBT -------------------------------------------------------------------------------------
def quantile_size(population: int, fraction: float = QUANTILE_FRACTION) -> int:
    """Members in each of the bottom and top quantiles, rounded as Ray Tune rounds them: up
    (``ceil(population * fraction)``, so at least one of two or more), at most half the population;
    none in a population of one."""
    if population <= 1:
        return 0
    return min(math.ceil(population * fraction), population // 2)


def explore(config: StageConfig, rng: random.Random, space: SearchSpace,
            resample_probability: float = RESAMPLE_PROBABILITY,
            perturbation_factors: Sequence[float] = PERTURBATION_FACTORS, fits=None) -> StageConfig:
    """Ray Tune's PBT explore over every knob of ``space``: each independently is resampled with
    probability ``resample_probability``, else multiplied by a factor drawn from
    ``perturbation_factors`` (:meth:`~loopwise.training.space.Knob.perturb`), kept in its range.
    A result ``fits`` rejects (too costly for one step of a stage, or untrainable) is explored again; after
    :data:`~loopwise.training.space.MAX_DRAWS` tries ``config`` is kept."""
    for _ in range(MAX_DRAWS):
        new = space.perturb(config, rng, resample_probability, tuple(perturbation_factors))
        if fits is None or fits(new):
            return new
    return config


def _space(session: Session) -> SearchSpace:
    return search_space(tree_bounds(session))


@dataclass
class _Member:
    config: StageConfig  # what the next round trains with
    state: bytes
    tune: float = math.nan
    configs: list[StageConfig] = field(default_factory=list)  # the lineage of ``state``
    traces: list[list[dict]] = field(default_factory=list)


def _exploit_and_explore(members: list[_Member], rng: random.Random, space: SearchSpace, fraction: float,
                         resample_probability: float, perturbation_factors: Sequence[float], fits,
                         ended: list[list[StageConfig]]) -> list[str]:
    """Replaces each bottom-quantile member by a perturbed copy of a random top-quantile member;
    the lineage each replaced member's weights had goes to ``ended``."""
    n = quantile_size(len(members), fraction)
    ranked = sorted(range(len(members)), key=lambda m: _score(members[m].tune))  # stable: ties rank by index
    bottom, top = ranked[:n], ranked[len(ranked) - n:]
    notes = []
    for m in bottom:
        d = rng.choice(top)
        donor = members[d]
        notes.append(f"member {m} ({members[m].tune:.3f}) takes member {d}'s weights ({donor.tune:.3f})")
        config = explore(donor.config, rng, space, resample_probability, perturbation_factors, fits)
        ended.append(list(members[m].configs))
        members[m] = _Member(config, donor.state, donor.tune, list(donor.configs), list(donor.traces))
    return notes


def _population_size(budget: int, depth: int, population: int | None) -> int:
    fits = _runs_that_fit(budget, depth, "pbt")
    if population is not None and population < 1:
        raise UserError(f"a pbt population needs at least 1 member, not {population}")
    return min(max(2, fits) if population is None else population, fits)


def pbt(session: Session, budget: int, depth: int, seed: int = 0, population: int | None = None, *,
        quantile_fraction: float = QUANTILE_FRACTION, resample_probability: float = RESAMPLE_PROBABILITY,
        perturbation_factors: Sequence[float] = PERTURBATION_FACTORS, unit: str = "samples") -> Schedule:
    """Population-based training over ``depth`` synchronous rounds of one stage each.

    ``P`` members (``population``, default ``max(2, budget // depth)``, always capped so that
    ``P * depth <= budget``) start from the base with ``random_configs(session, P, seed)``, the
    random baseline's first ``P`` configs. In round ``r`` member ``m`` trains one stage from its
    weights (seed ``seed * 1000 + r * 100 + m``) of the steps that cost what a default stage costs
    in ``unit`` (:func:`~loopwise.training.space.matched_steps`); configs of which not one step
    fits, or that leave no training prompt room (``session.trainable``), are drawn (or explored)
    again. After every round but the last, members are ranked by tuning reward; each of the bottom :func:`quantile_size` copies the weights, config
    and history of a random top member and perturbs the config with :func:`explore`. The defaults
    are Ray Tune's (FACTS.md §8): quantile fraction 0.25, resample probability 0.25, factors
    (1.2, 0.8); Ray's time-based ``perturbation_interval`` becomes one stage. With ``P = 1``
    (``budget < 2 * depth``) nothing is exploited: one random config trained in stages.

    Returns:
        The member with the best last tuning reward (lowest index on ties): ``configs`` and
        ``traces`` are the lineage of its weights, one per round, including what it inherited;
        ``stages_used = P * depth``; ``notes`` lists every exploit; ``paths`` holds every lineage
        of weights (a replaced member's up to its replacement, each last member's to the end), the
        default config first, for the knob directions over what the search did.

    Raises:
        UserError: the budget is less than ``depth`` stages, or ``population`` < 1, or
            ``quantile_fraction`` is outside [0, 0.5].
    """
    if not 0.0 <= quantile_fraction <= 0.5:
        raise UserError(f"pbt quantile_fraction {quantile_fraction} is outside [0, 0.5]")
    size = _population_size(budget, depth, population)
    rng = random.Random(f"pbt:{seed}")  # apart from random_configs' Random(seed)
    base, space = session.default_config(), _space(session)

    def steps(cfg: StageConfig) -> int:
        return matched_steps(cfg, base, base.steps, unit, session.base_length)

    whole, start = session.allowance, session.spent  # a token budget: each member's stage trains to its share

    def fits(cfg: StageConfig) -> bool:
        return steps(cfg) >= 1 and session.trainable(cfg) and (
            whole is None or whole.share_fits(start, depth * size, cfg))

    members = [_Member(cfg, session.base_state) for cfg in random_configs(session, size, seed, fits=fits)]
    ended: list[list[StageConfig]] = []
    notes = [f"population {size}, {quantile_size(size, quantile_fraction)} exploited per round"]
    for r in range(depth):
        for m, member in enumerate(members):
            with session.held_to(whole and whole.share(start, r * size + m, depth * size)):
                result = session.run_stage(member.state, member.config, seed * 1000 + r * 100 + m,
                                           steps=steps(member.config), label={"rep": m, "stage": r},
                                           to_allowance=whole is not None)
            member.state, member.tune = result.state, result.tune_reward
            member.configs.append(result.config)
            member.traces.append(result.trace)
        if r < depth - 1:
            notes += [f"round {r}: {line}" for line in _exploit_and_explore(
                members, rng, space, quantile_fraction, resample_probability, perturbation_factors, fits, ended)]
    winner = max(range(size), key=lambda m: (_score(members[m].tune), -m))
    best = members[winner]
    lineages = ended + [m.configs for m in members]
    return Schedule("pbt", best.configs, best.tune, best.state, size * depth, traces=best.traces,
                    notes=notes + [f"the best is member {winner}"], paths=[[base, *line] for line in lineages])
