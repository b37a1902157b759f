"""The search space the tuning baselines share with the tree: one definition, derived from the tree's.

Every knob the tree's transitions move (:data:`~loopwise.training.transitions.STEPS`) is a
dimension, over the range the tree keeps it in (:func:`~loopwise.training.session.tree_bounds`),
on the scale its step uses: a knob stepped by a factor (rates, sizes, coefficients) is drawn
log-uniformly, one stepped by an increment (clip ranges, the difficulty) uniformly, an integer
knob as an integer. A coefficient whose step starts from 0 (the KL and entropy terms) is *off* (0)
or log-uniform from the step's ``start`` to its maximum, at even odds: zero cannot sit on a log
scale, and a uniform draw would put nearly all its mass on large values.

The random baseline draws from it (:meth:`SearchSpace.sample`), TPE asks Optuna for it
(:meth:`SearchSpace.suggest`) and PBT perturbs and resamples within it
(:meth:`SearchSpace.perturb`, :meth:`SearchSpace.clamp`).

A config that moves the group size or the completion length costs more or less per step than the
default; :func:`matched_steps` gives the steps that keep a run at the default's cost, so every
method spends the same budget of generated samples (or tokens).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from loopwise.training.compute import Budget
from loopwise.training.config import StageConfig

__all__ = ["MAX_DRAWS", "Knob", "SearchSpace", "matched_steps", "search_space"]

MAX_DRAWS = 1000  # draws in a row a method may reject (as too costly for its budget) before it gives up


@dataclass(frozen=True)
class Knob:
    """One dimension: ``low..high`` on a log (``log``) or linear scale; ``off``: 0 is also a value."""

    name: str
    low: float
    high: float
    log: bool
    integer: bool
    off: bool = False

    def sample(self, rng: random.Random) -> float:
        """A draw: off at even odds (an ``off`` knob), else uniform on the knob's scale."""
        if self.off and rng.random() < 0.5:
            return 0.0
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return self._typed(value)

    def clamp(self, value: float) -> float:
        """``value`` inside the range; 0 stays 0 on an ``off`` knob."""
        if self.off and value == 0:
            return 0.0
        return self._typed(min(max(value, self.low), self.high))

    def perturb(self, value: float, factor: float) -> float:
        """``value`` times ``factor``, clamped (Ray Tune's PBT explore); an integer moves by at
        least 1 in the factor's direction; a term switched off stays off."""
        if self.off and value == 0:
            return 0.0
        new = value * factor
        if self.integer and round(new) == value:
            new = value + (1 if factor > 1 else -1)
        return self.clamp(new)

    def suggest(self, trial) -> float:
        """The knob asked of an Optuna trial; an ``off`` knob through a categorical ``<name>_on``."""
        if self.off and not trial.suggest_categorical(f"{self.name}_on", (False, True)):
            return 0.0
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log and self.low > 0)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def _typed(self, value: float) -> float:
        if self.integer:
            return int(min(max(round(value), self.low), self.high))
        return float(f"{value:.4g}")


@dataclass(frozen=True)
class SearchSpace:
    """The knobs (in :data:`~loopwise.training.transitions.STEPS` order) over a base config."""

    knobs: Mapping[str, Knob]

    def __post_init__(self) -> None:
        object.__setattr__(self, "knobs", MappingProxyType(dict(self.knobs)))

    def __iter__(self) -> Iterator[str]:
        return iter(self.knobs)

    def names(self) -> tuple[str, ...]:
        return tuple(self.knobs)

    def sample(self, base: StageConfig, rng: random.Random) -> StageConfig:
        """``base`` with every knob drawn afresh."""
        return _with(base, {k: knob.sample(rng) for k, knob in self.knobs.items()})

    def suggest(self, base: StageConfig, trial) -> StageConfig:
        """``base`` with every knob asked of an Optuna trial."""
        return _with(base, {k: knob.suggest(trial) for k, knob in self.knobs.items()})

    def clamp(self, config: StageConfig) -> StageConfig:
        return _with(config, {k: knob.clamp(getattr(config, k)) for k, knob in self.knobs.items()})

    def perturb(self, config: StageConfig, rng: random.Random, resample_probability: float,
                factors: tuple[float, ...]) -> StageConfig:
        """PBT's explore: each knob independently resampled with ``resample_probability``, else
        perturbed by a factor drawn from ``factors``."""
        update = {}
        for k, knob in self.knobs.items():
            if rng.random() < resample_probability:
                update[k] = knob.sample(rng)
            else:
                update[k] = knob.perturb(getattr(config, k), rng.choice(factors))
        return _with(config, update)


def _with(config: StageConfig, update: dict) -> StageConfig:
    """``config`` with ``update``, validated; a clip range the config rejects keeps the old pair."""
    try:
        return StageConfig(**(config.model_dump() | update))
    except ValueError:
        keep = {k: v for k, v in update.items() if k not in ("epsilon", "epsilon_high")}
        return StageConfig(**(config.model_dump() | keep))


def search_space(bounds) -> SearchSpace:
    """The space of every knob the tree's transitions move, within ``bounds`` (a
    :class:`~loopwise.training.transitions.Bounds`: the tree's, from ``tree_bounds(session)``)."""
    from loopwise.training.transitions import STEPS

    knobs = {}
    for name, step in STEPS.items():
        low, high = getattr(bounds, name)
        off = step.mode == "mul" and low <= 0 < step.start
        if off:
            low = min(step.start, high)
        elif step.mode == "mul" and low <= 0:
            raise ValueError(f"{name} is stepped by a factor, so its range must start above 0, not at {low}")
        knobs[name] = Knob(name, low, high, log=step.mode == "mul", integer=step.integer, off=off)
    return SearchSpace(knobs)


def matched_steps(config: StageConfig, reference: StageConfig, steps: int, unit: str = "samples",
                  length: float | None = None) -> int:
    """The most steps of ``config`` that cost no more than ``steps`` steps of ``reference`` in
    ``unit`` (samples: prompts x group size a step; tokens: times the completion length, ``length``
    expected or else the cap, see :meth:`~loopwise.training.compute.Budget.stage_cost`); 0 when
    not even one does."""
    cost = Budget(unit, 1).stage_cost
    return (steps * cost(reference, steps=1, length=length)) // cost(config, steps=1, length=length)
