"""A stage's metric trace and the robust statistics the diagnosis reads off it.

Levels are medians over windows of a quarter of the stage (at least :data:`MIN_WINDOW` steps), so
one noisy step never decides; trends are repeated-median slopes; a change counts as real only
beyond :data:`SIGNIFICANCE_Z` standard errors, the noise level being estimated robustly from
step-to-step differences.
"""

from __future__ import annotations

import itertools
import math
import numbers
import statistics
from collections.abc import Mapping, Sequence

from loopwise.training import metrics as m

__all__ = [
    "MIN_STEPS", "MIN_WINDOW", "SOLVED_REWARD", "TRUNCATED_HIGH", "UNSOLVED_REWARD", "ZERO_STD_HIGH", "Trace",
    "comparable", "fmt",
    "head", "noise", "number", "recent_gain", "recent_trend", "median_slope", "shift", "stage_shift", "tail", "window",
]

# -- how much trace a judgement needs, and what counts as a change ------------------------------
MIN_STEPS = 8  # training rows; below this a window would be 1-2 steps and one noisy step decides
MIN_WINDOW = 3  # the smallest window whose median ignores one outlier
WINDOW_DIVISOR = 4  # a window is a quarter of the series (at least MIN_WINDOW values)
SIGNIFICANCE_Z = 2.0  # a change (of window medians, or a slope's gain) is real beyond 2 standard errors
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # SE of a median / SE of a mean, for normal noise
REPEATED_MEDIAN_SE_FACTOR = 1 / math.sqrt(0.61)  # repeated-median slope's efficiency ~61% of least squares
TREND_MAX_POINTS = 40  # a trend over more steps is fitted to medians of bins (the fit is quadratic)
MIN_REWARD_CHANGE = 0.02  # on a noiseless trace, smaller reward moves still count as "no progress"

# -- levels several detectors share (rewards in [0, 1]) -----------------------------------------
SOLVED_REWARD = 0.8  # the policy solves most prompts at this difficulty
UNSOLVED_REWARD = 0.2  # ... or almost none (TinyZero gives 0.1 for format alone: that is "none")
# Zero-signal groups: Modal's DAPO tutorial, all-correct or all-wrong groups give zero advantage;
# when half the groups carry no signal the effective batch has halved. (Threshold ours.)
ZERO_STD_HIGH = 0.5
# Truncation: TRL #5697, a 0.5B model at 256 tokens had 97-99% truncated (reward 0) and ~14% at
# 1024 tokens once fixed; 30% sits between the broken and the working run. From this share on the
# stage's rewards are read as the cap's doing, not the policy's.
TRUNCATED_HIGH = 0.3


def number(value: object) -> float | None:
    """``value`` as a float when it is a real number (not a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars are Real too
        return None
    return float(value)


def window(n: int) -> int:
    """The window length for a series of ``n`` values: a quarter of it, at least :data:`MIN_WINDOW`."""
    return max(MIN_WINDOW, n // WINDOW_DIVISOR)


def head(values: Sequence[float]) -> float:
    """The median of the first window."""
    return statistics.median(values[:window(len(values))])


def tail(values: Sequence[float]) -> float:
    """The median of the last window."""
    return statistics.median(values[-window(len(values)):])


def noise(values: Sequence[float]) -> float:
    """Per-step noise sigma from the MAD of first differences (a trend shifts them, not their spread)."""
    diffs = [b - a for a, b in itertools.pairwise(values)]
    if len(diffs) < 2:
        return 0.0
    centre = statistics.median(diffs)
    return 1.4826 * statistics.median(abs(d - centre) for d in diffs) / math.sqrt(2)


def median_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Siegel's repeated-median slope: robust to a minority of outliers, unlike least squares."""
    return statistics.median(statistics.median((yb - ya) / (xb - xa) for xb, yb in zip(xs, ys) if xb != xa)
                             for xa, ya in zip(xs, ys))


def shift(before: Sequence[float], after: Sequence[float], noise: float, floor: float) -> tuple[float, float]:
    """Difference of two windows' medians and the smallest difference that is not noise."""
    w = min(len(before), len(after))
    band = SIGNIFICANCE_Z * MEDIAN_SE_FACTOR * noise * math.sqrt(2 / w)
    return statistics.median(after) - statistics.median(before), max(floor, band)


def stage_shift(values: Sequence[float], floor: float = MIN_REWARD_CHANGE) -> tuple[float, float]:
    """The shift from the first window to the last over the stage, and the smallest that is not noise."""
    w = window(len(values))
    return shift(values[:w], values[-w:], noise(values), floor)


def _recent_points(values: Sequence[float]) -> tuple[list[float], list[float], float, int]:
    """The last two windows as points to fit (medians of bins when the windows are long, to bound
    the fit's quadratic cost), the per-point noise sigma, and the window length."""
    w = window(len(values))
    tail = values[-2 * w:]
    size = math.ceil(len(tail) / TREND_MAX_POINTS)
    bins = [tail[k:k + size] for k in range(0, len(tail), size)]
    xs = [k * size + (len(b) - 1) / 2 for k, b in enumerate(bins)]
    ys = [statistics.median(b) for b in bins]
    return xs, ys, noise(values) * (MEDIAN_SE_FACTOR / math.sqrt(size) if size > 1 else 1.0), w


def _fit(xs: Sequence[float], ys: Sequence[float], sigma: float, w: int) -> tuple[float, float, float]:
    """The robust slope, its gain per window and the gain's standard error (least squares' slope
    SE, widened)."""
    slope, centre = median_slope(xs, ys), statistics.fmean(xs)
    sxx = sum((x - centre) ** 2 for x in xs)
    return slope, slope * w, REPEATED_MEDIAN_SE_FACTOR * sigma / math.sqrt(sxx) * w


def recent_gain(values: Sequence[float]) -> tuple[float, float]:
    """The gain per window over the last two windows (robust slope) and its standard error, from
    the step-to-step noise alone."""
    return _fit(*_recent_points(values))[1:]


def recent_trend(values: Sequence[float], floor: float = MIN_REWARD_CHANGE) -> tuple[float, float, bool]:
    """How reward moved over the last two windows.

    Returns:
        The gain per window from the robust slope (:func:`recent_gain`), the smallest gain that is
        not noise, and whether the gain exceeds it with all points or without the one furthest
        from the robust line: one noisy step cannot make a trace look stalled (it can hide a stall,
        the direction that fires nothing).
    """
    xs, ys, sigma, w = _recent_points(values)
    slope, gain, se = _fit(xs, ys, sigma, w)
    band = max(floor, SIGNIFICANCE_Z * se)
    base = statistics.median(y - slope * x for x, y in zip(xs, ys))
    worst = max(range(len(xs)), key=lambda k: abs(ys[k] - base - slope * xs[k]))
    _, gain_without, se_without = _fit(xs[:worst] + xs[worst + 1:], ys[:worst] + ys[worst + 1:], sigma, w)
    return gain, band, gain > band or gain_without > max(floor, SIGNIFICANCE_Z * se_without)


def comparable(values: Sequence[float]) -> bool:
    """Whether the series holds two windows to compare."""
    return len(values) >= 2 * MIN_WINDOW


def fmt(x: float) -> str:
    """A number with three significant digits, as the guidance quotes it."""
    return f"{x:.3g}"


class Trace:
    """A trace split into training rows and held-out evaluation rows, with finite series per key."""

    def __init__(self, trace: Sequence[Mapping]) -> None:
        rows = [r for r in trace if isinstance(r, Mapping)]
        self.evals = [r for r in rows if m.EVAL_REWARD in r or m.TRAIN_EVAL_REWARD in r]
        self.train = [r for r in rows if not (m.EVAL_REWARD in r or m.TRAIN_EVAL_REWARD in r)]
        self._columns: dict[str, list[float | None]] = {}

    def column(self, key: str) -> list[float | None]:
        """One value per training row: the number, or None where missing or not finite."""
        if key not in self._columns:
            values = (number(r.get(key)) for r in self.train)
            self._columns[key] = [v if v is not None and math.isfinite(v) else None for v in values]
        return self._columns[key]

    def series(self, key: str) -> list[float]:
        return [v for v in self.column(key) if v is not None]

    def nonfinite(self, key: str) -> int:
        return sum(1 for r in self.train if (v := number(r.get(key))) is not None and not math.isfinite(v))

    def span(self) -> int:
        steps = [s for r in self.train if (s := number(r.get(m.STEP))) is not None and math.isfinite(s)]
        return int(steps[-1] - steps[0]) if len(steps) >= 2 else len(self.train)

    def reward_level(self) -> float | None:
        rewards = self.series(m.REWARD)
        return tail(rewards) if comparable(rewards) else None

    def truncated_share(self) -> float | None:
        """The share of completions cut at the length cap in the last window; None when not logged."""
        clipped = self.series(m.CLIPPED)
        return tail(clipped) if comparable(clipped) else None

    def answers_cut(self) -> bool:
        """Whether at least :data:`TRUNCATED_HIGH` of the last window's completions hit the cap: a
        reward pattern is then the cap's, not the policy's."""
        share = self.truncated_share()
        return share is not None and share >= TRUNCATED_HIGH

    def reward_progressing(self) -> bool | None:
        """Whether sampled reward rose significantly in the last window; None without enough reward."""
        rewards = self.series(m.REWARD)
        if not comparable(rewards):
            return None
        return recent_trend(rewards)[2]

    def greedy_progressing(self) -> bool | None:
        """Whether the greedy probe's reward rose significantly in the last window; None without
        enough probes."""
        greedy = self.series(m.GREEDY_REWARD)
        if not comparable(greedy):
            return None
        return recent_trend(greedy)[2]
