"""Comparisons over seeds: a mean with its t-interval, and a method against another paired by seed.

Each seed is one whole comparison (its own base policy, data and method seeds), so two methods'
results on the same seed are a pair; the interval of the per-seed differences is what a claim
that one method beats another rests on. An interval that holds 0 is reported as no difference.
Several methods compared with one reference are several claims: beside each pair's own 95%
interval, a summary gives the family's (Bonferroni: each of ``k`` intervals at ``1 - 0.05 / k``,
so that all ``k`` hold together with 95% confidence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from loopwise.core.stats import CONFIDENCE, NO_SPREAD, Interval, mean_interval, sign_test_seeds, t_quantile

__all__ = ["CONFIDENCE", "NO_SPREAD", "Interval", "mean_interval", "sign_test_seeds", "t_quantile",
           "paired_difference", "MethodSummary", "summarize"]


def paired_difference(first: Mapping[int, float], second: Mapping[int, float],
                      confidence: float = CONFIDENCE) -> Interval:
    """``first - second`` per seed both have, and the t-interval of its mean."""
    return mean_interval(_differences(first, second), confidence)


def _differences(first: Mapping[int, float], second: Mapping[int, float]) -> list[float]:
    return [first[s] - second[s] for s in sorted(set(first) & set(second))]


@dataclass(frozen=True)
class MethodSummary:
    """One method over seeds: its test reward, and ``reference - method`` paired by seed (None for
    the reference itself, or when the reference did not run): alone (``versus_reference``, at 95%)
    and as one of the ``comparisons`` of its family (``versus_family``: every method with at least
    two seeds paired with the reference, all at once)."""

    method: str
    test: Interval
    versus_reference: Interval | None
    versus_family: Interval | None = None
    comparisons: int = 0


def summarize(test_rewards: Mapping[int, Mapping[str, float]], reference: str = "tree") -> list[MethodSummary]:
    """Per method (in the order first seen): its test rewards' interval over the seeds, and the
    paired difference of ``reference`` to it, alone and in its family: the ``k`` methods with at
    least two seeds paired with ``reference`` (one seed makes no interval, so no claim), each
    interval at ``1 - 0.05 / k`` (Bonferroni). ``test_rewards`` is ``{seed: {method: reward}}``."""
    methods = list(dict.fromkeys(m for by_method in test_rewards.values() for m in by_method))
    per = {m: {s: r[m] for s, r in test_rewards.items() if m in r} for m in methods}
    diffs = {m: _differences(per[reference], per[m]) for m in methods if reference in per and m != reference}
    alone = {m: mean_interval(d) for m, d in diffs.items()}
    k = sum(1 for v in alone.values() if v.n >= 2)  # the claims the family makes
    level = 1 - (1 - CONFIDENCE) / max(k, 1)
    return [MethodSummary(m, mean_interval(list(per[m].values())), alone.get(m),
                          mean_interval(diffs[m], level) if m in diffs else None, k)
            for m in methods]
