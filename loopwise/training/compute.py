"""What training spent: completions generated (samples) and their tokens, per stage and per method.

A trainer's step rows carry both counts (:data:`~loopwise.training.metrics.SAMPLES`,
:data:`~loopwise.training.metrics.TOKENS`). A row without them (a trace written before they were
recorded) is counted from its stage's config (prompts per step x group size) and its mean
completion length. Held-out evaluation rows spend nothing here: every method measures the same sets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from loopwise.training import metrics as M


@dataclass(frozen=True)
class Compute:
    """Generated completions and their tokens (end tokens included)."""

    samples: int = 0
    tokens: int = 0

    def __add__(self, other: Compute) -> Compute:
        return Compute(self.samples + other.samples, self.tokens + other.tokens)

    def __sub__(self, other: Compute) -> Compute:
        return Compute(self.samples - other.samples, self.tokens - other.tokens)


@dataclass(frozen=True)
class StageTally:
    """Stages trained, and those an allowance stopped short of (``cut``) or ran past (``longer``)
    the steps they were planned with; ``steps``: the steps they trained."""

    stages: int = 0
    cut: int = 0
    longer: int = 0
    steps: int = 0

    @classmethod
    def of(cls, planned: int, ran: int) -> StageTally:
        """One stage planned with ``planned`` steps that trained ``ran``."""
        return cls(1, int(ran < planned), int(ran > planned), ran)

    def __add__(self, other: StageTally) -> StageTally:
        return StageTally(self.stages + other.stages, self.cut + other.cut, self.longer + other.longer,
                          self.steps + other.steps)

    def __sub__(self, other: StageTally) -> StageTally:
        return StageTally(self.stages - other.stages, self.cut - other.cut, self.longer - other.longer,
                          self.steps - other.steps)

    def to_dict(self) -> dict:
        return {"stages": self.stages, "cut": self.cut, "longer": self.longer, "steps": self.steps}


def _count(v) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return float(v) if ok else None


def step_compute(row: dict, per_step: int | None) -> Compute:
    """One training row's spend; ``per_step`` (prompts x group size) stands in for a missing count."""
    samples = _count(row.get(M.SAMPLES))
    samples = samples if samples is not None else per_step
    if samples is None:
        return Compute()
    tokens = _count(row.get(M.TOKENS))
    if tokens is None:
        length = _count(row.get(M.LENGTH))
        tokens = length * samples if length is not None else 0.0
    return Compute(int(samples), int(round(tokens)))


def stage_compute(trace: Iterable, config: dict | None = None) -> Compute:
    """A stage's spend: the sum over its training rows (rows with ``reward``; evaluation rows have
    none). ``config`` is the stage's config as a dict, for rows without their own counts."""
    config = config if isinstance(config, dict) else {}
    p, g = _count(config.get("prompts_per_step")), _count(config.get("num_generations"))
    per_step = int(p * g) if p is not None and g is not None else None
    total = Compute()
    for row in trace if isinstance(trace, list) else []:
        if isinstance(row, dict) and M.REWARD in row:
            total = total + step_compute(row, per_step)
    return total


UNITS = ("samples", "tokens")
BUDGET_NOTE = "(the budget)"  # ends a method's note on where a token budget cut or stopped its training


@dataclass(frozen=True)
class Budget:
    """What one method may spend: ``amount`` generated samples or tokens (``unit``).

    A stage's samples are known before it runs (steps x prompts per step x group size), so in
    samples a method starts a stage only when its cost (:meth:`stage_cost`) fits what it has left:
    it never spends more than ``amount`` and stops short of it by less than one of its stages (one
    of its runs, for a method that trains whole runs). A stage's tokens are known only once it has
    run: in tokens a method plans with an expected completion length and is held to the budget by
    an :class:`Allowance`, checked before every step."""

    unit: str
    amount: int

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"a budget is in {' or '.join(UNITS)}, not {self.unit!r}")
        if self.amount < 1:
            raise ValueError(f"a budget needs at least 1 {self.unit[:-1]}, not {self.amount}")

    def stage_cost(self, config, steps: int | None = None, length: float | None = None) -> int:
        """What a stage of ``config`` (``steps`` overriding its length) spends in this unit: its
        samples, or in tokens its samples times ``length`` (an expected completion length, at most
        the cap) or, without one, times the cap ``max_completion_length`` (the most it can spend)."""
        samples = (config.steps if steps is None else steps) * config.prompts_per_step * config.num_generations
        if self.unit == "samples":
            return samples
        cap = config.max_completion_length
        return samples * cap if length is None else max(1, round(samples * min(length, cap)))

    def of(self, compute: Compute) -> int:
        """``compute`` in this budget's unit."""
        return compute.samples if self.unit == "samples" else compute.tokens

    def fits(self, spent: Compute, config, steps: int | None = None) -> bool:
        """Whether a stage of ``config`` fits after ``spent`` at its most."""
        return self.of(spent) + self.stage_cost(config, steps) <= self.amount

    def stages(self, config, length: float | None = None) -> int:
        """How many stages of ``config`` fit in the whole budget (at ``length``, see :meth:`stage_cost`)."""
        return self.amount // self.stage_cost(config, length=length)

    def to_dict(self) -> dict:
        return {"unit": self.unit, "amount": self.amount}


@dataclass(frozen=True)
class Allowance:
    """A ceiling on what a session has spent, in ``budget``'s unit: a step starts only when its
    most (prompts x group size, times the completion cap in tokens) fits under ``ceiling``, so
    training never passes it and stops within one step's most of it."""

    budget: Budget
    ceiling: int

    def step_fits(self, spent: Compute, config) -> bool:
        """Whether one more step of ``config`` fits after ``spent``."""
        return self.budget.of(spent) + self.budget.stage_cost(config, steps=1) <= self.ceiling

    def steps_allowed(self, spent: Compute, config, steps: Iterable[Compute]) -> int:
        """How many of ``steps`` (each step's spend, in order) start under the ceiling after ``spent``."""
        n = 0
        for step in steps:
            if not self.step_fits(spent, config):
                break
            spent, n = spent + step, n + 1
        return n

    def stop_rule(self, spent: Compute, config):
        """A trainer's ``stop`` for a stage of ``config`` begun after ``spent``: true, given the
        stage's training rows so far, when the next step does not fit."""
        return lambda rows: not self.step_fits(spent + stage_compute(rows, config.model_dump()), config)

    def allows(self, spent: Compute, config, trace: list) -> bool:
        """Whether every training row of a stage's ``trace`` (of ``config``) starts under the
        ceiling after ``spent``: the stage as trained under this allowance would not be cut."""
        per_step = config.prompts_per_step * config.num_generations
        rows = [step_compute(r, per_step) for r in trace if isinstance(r, dict) and M.REWARD in r]
        return self.steps_allowed(spent, config, rows) == len(rows)

    def most_steps(self, spent: Compute, config) -> int:
        """More steps of ``config`` than can fit after ``spent``: every completion spends at least
        one token (its end), so no more than the rest over one token a completion."""
        return (self.ceiling - self.budget.of(spent)) // (config.prompts_per_step * config.num_generations)

    def share_fits(self, start: Compute, n: int, config) -> bool:
        """Whether one step of ``config`` at its most fits each of ``n`` equal shares of what is
        left after ``start`` (so a run of it always has room to start in its :meth:`share`)."""
        return self.budget.stage_cost(config, steps=1) <= (self.ceiling - self.budget.of(start)) // n

    def share(self, start: Compute, i: int, n: int) -> Allowance:
        """The ceiling for the ``i``-th of ``n`` runs sharing what is left after ``start`` equally
        (cumulative: a run that spends less than its share leaves it to the next)."""
        begin = self.budget.of(start)
        return Allowance(self.budget, begin + (self.ceiling - begin) * (i + 1) // n)
