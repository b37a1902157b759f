"""A mean with its t-interval: the statistics every engine's comparisons rest on (seeds of a training
comparison, problems of a benchmark sample), with no dependency beyond the standard library."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
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
    """A mean over ``n`` values (seeds, problems) and its t-interval at ``confidence`` (NaN bounds
    below two values)."""

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
