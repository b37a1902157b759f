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


@dataclass(frozen=True)
class Budget:
    """What one method may spend: ``amount`` generated samples or tokens (``unit``).

    A method starts a stage only when the stage's cost (:meth:`stage_cost`) fits what it has left,
    so it never spends more than ``amount`` and stops short of it by less than one of its stages
    (one of its runs, for a method that trains whole runs). A stage's samples are known before it
    runs (steps x prompts per step x group size); its tokens are not, so a token budget charges each
    completion its full ``max_completion_length`` when deciding (the bound is never exceeded, but a
    method may stop further below it than one stage's actual tokens)."""

    unit: str
    amount: int

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"a budget is in {' or '.join(UNITS)}, not {self.unit!r}")
        if self.amount < 1:
            raise ValueError(f"a budget needs at least 1 {self.unit[:-1]}, not {self.amount}")

    def stage_cost(self, config, steps: int | None = None) -> int:
        """The most a stage of ``config`` (``steps`` overriding its length) can spend in this unit."""
        samples = (config.steps if steps is None else steps) * config.prompts_per_step * config.num_generations
        return samples if self.unit == "samples" else samples * config.max_completion_length

    def of(self, compute: Compute) -> int:
        """``compute`` in this budget's unit."""
        return compute.samples if self.unit == "samples" else compute.tokens

    def fits(self, spent: Compute, config, steps: int | None = None) -> bool:
        """Whether a stage of ``config`` fits after ``spent``."""
        return self.of(spent) + self.stage_cost(config, steps) <= self.amount

    def stages(self, config) -> int:
        """How many stages of ``config`` fit in the whole budget."""
        return self.amount // self.stage_cost(config)

    def to_dict(self) -> dict:
        return {"unit": self.unit, "amount": self.amount}
