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
