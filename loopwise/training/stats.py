"""Comparisons over seeds: a mean with its t-interval, and a method against another paired by seed.

Each seed is one whole comparison (its own base policy, data and method seeds), so two methods'
results on the same seed are a pair; the interval of the per-seed differences is what a claim
that one method beats another rests on. An interval that holds 0 is reported as no difference.
Several methods compared with one reference are several claims: beside each pair's own 95%
interval, a summary gives the family's (Bonferroni: each of ``k`` intervals at ``1 - 0.05 / k``,
so that all ``k`` hold together with 95% confidence).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
NO_SPREAD = 1e-9  # an interval narrower than this has no width: the seeds agreed to rounding


def sign_test_seeds(confidence: float = CONFIDENCE) -> int:
    """The fewest seeds that, all differing the same way, give a two-sided sign test's
    p = 2^(1 - n) below ``1 - confidence``."""
    return 1 + math.ceil(math.log2(1 / (1 - confidence)))


def _t_density(x: float, df: int) -> float:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf_above_zero(x: float, df: int, intervals: int = 2000) -> float:
    """P(0 < T < x) by Simpson's rule (the density is smooth; 2000 intervals give 1e-6)."""
    h = x / intervals
    total = _t_density(0.0, df) + _t_density(x, df)
    total += sum((4 if i % 2 else 2) * _t_density(i * h, df) for i in range(1, intervals))
    return total * h / 3


@functools.lru_cache(maxsize=None)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided ``confidence`` quantile of Student's t with ``df`` degrees of freedom
    (``t(0.975, df)`` for 95%), by bisection on its distribution function; remembered per
    argument, since a summary asks for the same few many times."""
    if df < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, not {df}")
    target, low, high = confidence / 2, 0.0, 1.0
    while _t_cdf_above_zero(high, df) < target:
        high *= 2
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_cdf_above_zero(mid, df) < target else (low, mid)
    return (low + high) / 2


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` seeds and its t-interval at ``confidence`` (NaN bounds below two seeds)."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float = CONFIDENCE

    def verdict(self) -> str:
        """``higher`` or ``lower`` when the interval lies above or below 0, else ``no difference``.

        An interval without width (every seed gave the same value: quantized rewards do that) is
        no measured spread; its direction is taken only where a sign test at the interval's
        confidence would take it, every seed the same way and at least :func:`sign_test_seeds`
        of them."""
        if self.n < 2 or math.isnan(self.low):
            return "one seed: no interval" if self.n == 1 else "no seeds"
        if math.isclose(self.low, self.high, rel_tol=0.0, abs_tol=NO_SPREAD) and self.n < sign_test_seeds(self.confidence):
            return "no difference"
        if self.low > 0:
            return "higher"
        return "lower" if self.high < 0 else "no difference"


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean of ``values`` (NaN ones left out) and its t-interval."""
    xs = [float(v) for v in values if not math.isnan(v)]
    if not xs:
        return Interval(math.nan, math.nan, math.nan, 0, confidence)
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return Interval(mean, math.nan, math.nan, 1, confidence)
    half = t_quantile(len(xs) - 1, confidence) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half, len(xs), confidence)


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
