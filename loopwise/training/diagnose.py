"""Pathologies of one GRPO stage, read off its metric trace at the checkpoint.

Each detector looks at the trace (per-step dicts, oldest first, names from
:mod:`loopwise.training.metrics`) and says what it saw as a :class:`TrainingFinding`: one sentence
with the numbers, the numbers themselves, a severity, a score to rank findings against each other,
and the knobs the usual response moves (``suggests``), which is the vocabulary the expert
transitions (:mod:`loopwise.training.transitions`) and the LLM proposers share.

Levels are *medians over windows* of a quarter of the stage (at least :data:`MIN_WINDOW` steps),
so one noisy step never decides. Whether reward still rises is a robust (repeated-median) slope
over the last two windows, re-fitted without its worst point before a stall is declared; a change
counts as real only beyond :data:`SIGNIFICANCE_Z` standard errors, the noise level being estimated
robustly from step-to-step differences. Over the shortest traces (3-step windows) that reward
test has little power either way; its calls firm up from about 20 steps. A trace with fewer than
:data:`MIN_STEPS` training rows is too short to judge and gives no findings. Rewards are assumed
to lie in [0, 1] (verifier rewards such as TinyZero's 0 / 0.1 / 1). Missing keys and NaN/inf
values are skipped, except that a non-finite KL is itself the KL blow-up.
"""

from __future__ import annotations

import itertools
import math
import numbers
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from loopwise.training import metrics as m
from loopwise.training.config import CAPACITY, REGULARIZATION, StageConfig

if TYPE_CHECKING:
    from loopwise.core.propose import FindingNote

__all__ = [
    "DETECTORS", "KNOBS", "MIN_STEPS", "MIN_WINDOW", "SEVERITIES", "Severity", "TrainingFinding",
    "diagnose", "severity_for",
]

Severity = Literal["low", "medium", "high"]
SEVERITIES: tuple[Severity, ...] = ("low", "medium", "high")
KNOBS = CAPACITY + REGULARIZATION  # what ``suggests`` may name

# -- how much trace a judgement needs, and what counts as a change ------------------------------
MIN_STEPS = 8  # training rows; below this a window would be 1-2 steps and one noisy step decides
MIN_WINDOW = 3  # the smallest window whose median ignores one outlier
WINDOW_DIVISOR = 4  # a window is a quarter of the series (at least MIN_WINDOW values)
SIGNIFICANCE_Z = 2.0  # a change (of window medians, or a slope's gain) is real beyond 2 standard errors
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # SE of a median / SE of a mean, for normal noise
REPEATED_MEDIAN_SE_FACTOR = 1 / math.sqrt(0.61)  # repeated-median slope's efficiency ~61% of least squares
TREND_MAX_POINTS = 40  # a trend over more steps is fitted to medians of bins (the fit is quadratic)
MIN_REWARD_CHANGE = 0.02  # on a noiseless trace, smaller reward moves still count as "no progress"

# -- reward levels (rewards in [0, 1]) ----------------------------------------------------------
SOLVED_REWARD = 0.8  # the policy solves most prompts at this difficulty
UNSOLVED_REWARD = 0.2  # ... or almost none (TinyZero gives 0.1 for format alone: that is "none")

# -- thresholds, with where the numbers come from (FACTS.md section 8) --------------------------
# Entropy collapse: arXiv 2505.22617 reports -73% entropy in the first 200 steps with 76% of the
# final gain already made; a stage here is tens of steps, so half that fall already fires.
ENTROPY_COLLAPSE_DROP = 0.5
ENTROPY_FLOOR = 0.05  # nats; a start below this has nothing left to collapse (and ratios are noise)
# Entropy explosion: rllm #116 saw training fine below ~1 nat and decline at 2.0 (a doubling);
# +50% over the stage's start with reward not rising fires before the doubling.
ENTROPY_EXPLOSION_RISE = 0.5
# Zero-signal groups: Modal's DAPO tutorial, all-correct or all-wrong groups give zero advantage;
# when half the groups carry no signal the effective batch has halved. (Threshold ours.)
ZERO_STD_HIGH = 0.5
# KL: TRL PR #6637 / Gdisbar/RL put healthy per-token k3 KL at 0.01-0.1; the k3 estimate can overflow.
KL_HEALTHY_MAX = 0.1
# Truncation: TRL #5697, a 0.5B model at 256 tokens had 97-99% truncated (reward 0) and ~14% at
# 1024 tokens once fixed; 30% sits between the broken and the working run.
TRUNCATED_HIGH = 0.3
# Length explosion / collapse: SofT-GRPO #4, EasyR1 #40 and ms-swift #4758 report the pattern,
# not a ratio; a doubling / halving of the mean length within one stage is ours.
LENGTH_EXPLOSION_RATIO = 2.0
LENGTH_COLLAPSE_RATIO = 0.5
# Sudden collapse: Search-R1 #88/#89 and ConvSearch-R1 #6, reward -> 0 with a grad_norm spike;
# the drop size and the spike ratio are ours.
COLLAPSE_DROP = 0.3  # absolute fall of the windowed reward from its peak ...
COLLAPSE_KEEP = 0.5  # ... to at most half the peak
GRAD_SPIKE_RATIO = 5.0  # peak grad_norm over its median before the fall
# Overfitting without KL: autocontext PR #1076, train 0.65 -> 0.74 vs held-out 0.63 -> 0.58 at
# beta=0 (a 0.16 gap), fixed by beta=0.04.
GAP_HIGH = 0.1
# held-out reward lower at the stage's end than at its start (both measured on the same tuning set):
# a drop of at least 0.03 absolute and 10% relative counts; 0.15 scores 1
REGRESSION_MIN = 0.03
REGRESSION_RELATIVE = 0.10
REGRESSION_FULL_SCORE = 0.15
GAP_FULL_SCORE = 0.25  # a gap this wide scores 1
# Clip saturation: no number in FACTS; PPO practice watches a clip fraction of 0.1-0.2, beyond it
# the steps are too large for the trust region. To be calibrated on our own runs.
CLIP_SATURATED = 0.2
CLIP_FULL_SCORE = 0.5


def severity_for(score: float) -> Severity:
    """Severity band of a score (the same bands as the kernel engine's findings)."""
    return "high" if score >= 0.6 else "medium" if score >= 0.3 else "low"


@dataclass(frozen=True)
class TrainingFinding:
    """What one detector saw in one stage's trace.

    Attributes:
        kind: the pathology, e.g. ``entropy_collapse``.
        guidance: one plain sentence with the numbers and the usual response.
        evidence: the numbers behind it, by name.
        severity: ``low`` < ``medium`` < ``high``; follows ``score``.
        score: 0..1, for ranking findings of different detectors.
        suggests: ``{StageConfig knob: "up" | "down"}``, the usual response.
    """

    kind: str
    guidance: str
    evidence: Mapping[str, float | int | str] = field(default_factory=dict)
    severity: Severity = "low"
    score: float = 0.0
    suggests: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.guidance.strip():
            raise ValueError("a finding needs a sentence of guidance")
        if self.severity not in SEVERITIES or not 0.0 <= self.score <= 1.0:
            raise ValueError(f"bad severity/score {self.severity!r}/{self.score}")
        bad = {k: v for k, v in self.suggests.items() if k not in KNOBS or v not in ("up", "down")}
        if bad:
            raise ValueError(f"suggests {bad} must map knobs {KNOBS} to 'up' or 'down'")
        object.__setattr__(self, "evidence", MappingProxyType(dict(self.evidence)))
        object.__setattr__(self, "suggests", MappingProxyType(dict(self.suggests)))

    @classmethod
    def make(cls, kind: str, guidance: str, evidence: Mapping[str, float | int | str], score: float,
             suggests: Mapping[str, str]) -> TrainingFinding:
        """A finding whose score is clamped to 0..1 and rounded, and whose severity follows it."""
        score = round(min(1.0, max(0.0, score)), 4)
        evidence = {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in evidence.items()}
        return cls(kind, guidance, evidence, severity_for(score), score, suggests)

    def as_note(self) -> FindingNote:
        """The finding as a proposer reads it: the guidance as text; kind, severity, score, the
        evidence and the suggested knob moves as evidence."""
        from loopwise.core.propose import FindingNote

        suggests = ", ".join(f"{k} {v}" for k, v in self.suggests.items())
        evidence = {"kind": self.kind, "severity": self.severity, "score": self.score, **self.evidence}
        return FindingNote(text=self.guidance, evidence=evidence | ({"suggests": suggests} if suggests else {}))


# -- the trace and robust statistics over it --------------------------------------------------------

def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars are Real too
        return None
    return float(value)


def _window(n: int) -> int:
    return max(MIN_WINDOW, n // WINDOW_DIVISOR)


def _head(values: Sequence[float]) -> float:
    return statistics.median(values[:_window(len(values))])


def _tail(values: Sequence[float]) -> float:
    return statistics.median(values[-_window(len(values)):])


def _noise(values: Sequence[float]) -> float:
    """Per-step noise sigma from the MAD of first differences (a trend shifts them, not their spread)."""
    diffs = [b - a for a, b in itertools.pairwise(values)]
    if len(diffs) < 2:
        return 0.0
    centre = statistics.median(diffs)
    return 1.4826 * statistics.median(abs(d - centre) for d in diffs) / math.sqrt(2)


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Siegel's repeated-median slope: robust to a minority of outliers, unlike least squares."""
    return statistics.median(statistics.median((yb - ya) / (xb - xa) for xb, yb in zip(xs, ys) if xb != xa)
                             for xa, ya in zip(xs, ys))


def _shift(before: Sequence[float], after: Sequence[float], noise: float, floor: float) -> tuple[float, float]:
    """Difference of two windows' medians and the smallest difference that is not noise."""
    w = min(len(before), len(after))
    band = SIGNIFICANCE_Z * MEDIAN_SE_FACTOR * noise * math.sqrt(2 / w)
    return statistics.median(after) - statistics.median(before), max(floor, band)


def _stage_shift(values: Sequence[float], floor: float = MIN_REWARD_CHANGE) -> tuple[float, float]:
    w = _window(len(values))
    return _shift(values[:w], values[-w:], _noise(values), floor)


def _recent_trend(values: Sequence[float], floor: float = MIN_REWARD_CHANGE) -> tuple[float, float, bool]:
    """How reward moved over the last two windows.

    Returns:
        The gain per window from the robust slope (over medians of bins when the windows are long,
        to bound the quadratic cost), the smallest gain that is not noise, and whether the gain
        exceeds it with all points or without the one furthest from the robust line: one noisy step
        cannot make a trace look stalled (it can hide a stall, the direction that fires nothing).
    """
    w = _window(len(values))
    tail = values[-2 * w:]
    size = math.ceil(len(tail) / TREND_MAX_POINTS)
    bins = [tail[k:k + size] for k in range(0, len(tail), size)]
    xs = [k * size + (len(b) - 1) / 2 for k, b in enumerate(bins)]
    ys = [statistics.median(b) for b in bins]
    sigma = _noise(values) * (MEDIAN_SE_FACTOR / math.sqrt(size) if size > 1 else 1.0)

    def fit(px: Sequence[float], py: Sequence[float]) -> tuple[float, float, float]:
        slope, centre = _slope(px, py), statistics.fmean(px)
        sxx = sum((x - centre) ** 2 for x in px)
        se = REPEATED_MEDIAN_SE_FACTOR * sigma / math.sqrt(sxx)  # least squares' slope SE, widened
        return slope, slope * w, max(floor, SIGNIFICANCE_Z * se * w)

    slope, gain, band = fit(xs, ys)
    base = statistics.median(y - slope * x for x, y in zip(xs, ys))
    worst = max(range(len(xs)), key=lambda k: abs(ys[k] - base - slope * xs[k]))
    _, gain_without, band_without = fit(xs[:worst] + xs[worst + 1:], ys[:worst] + ys[worst + 1:])
    return gain, band, gain > band or gain_without > band_without


def _comparable(values: Sequence[float]) -> bool:
    return len(values) >= 2 * MIN_WINDOW


def _f(x: float) -> str:
    return f"{x:.3g}"


class _Trace:
    """A trace split into training rows and held-out evaluation rows, with finite series per key."""

    def __init__(self, trace: Sequence[Mapping]) -> None:
        rows = [r for r in trace if isinstance(r, Mapping)]
        self.evals = [r for r in rows if m.EVAL_REWARD in r or m.TRAIN_EVAL_REWARD in r]
        self.train = [r for r in rows if not (m.EVAL_REWARD in r or m.TRAIN_EVAL_REWARD in r)]
        self._columns: dict[str, list[float | None]] = {}

    def column(self, key: str) -> list[float | None]:
        """One value per training row: the number, or None where missing or not finite."""
        if key not in self._columns:
            values = (_number(r.get(key)) for r in self.train)
            self._columns[key] = [v if v is not None and math.isfinite(v) else None for v in values]
        return self._columns[key]

    def series(self, key: str) -> list[float]:
        return [v for v in self.column(key) if v is not None]

    def nonfinite(self, key: str) -> int:
        return sum(1 for r in self.train if (v := _number(r.get(key))) is not None and not math.isfinite(v))

    def span(self) -> int:
        steps = [s for r in self.train if (s := _number(r.get(m.STEP))) is not None and math.isfinite(s)]
        return int(steps[-1] - steps[0]) if len(steps) >= 2 else len(self.train)

    def reward_level(self) -> float | None:
        rewards = self.series(m.REWARD)
        return _tail(rewards) if _comparable(rewards) else None

    def reward_progressing(self) -> bool | None:
        """Whether reward rose significantly in the last window; None without enough reward."""
        rewards = self.series(m.REWARD)
        if not _comparable(rewards):
            return None
        return _recent_trend(rewards)[2]


Detector = Callable[[_Trace, "StageConfig | None"], "TrainingFinding | None"]


# -- the detectors ------------------------------------------------------------------------------

def _entropy_collapse(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    ent, level = t.series(m.ENTROPY), t.reward_level()
    if not _comparable(ent) or level is None:
        return None
    start, end = _head(ent), _tail(ent)
    if start < ENTROPY_FLOOR or 1 - end / start < ENTROPY_COLLAPSE_DROP:
        return None
    if t.reward_progressing() and level < SOLVED_REWARD:
        return None  # still learning: entropy is being spent on progress
    drop = 1 - end / start
    return TrainingFinding.make(
        "entropy_collapse",
        f"Entropy fell from {_f(start)} to {_f(end)} nats ({-drop:+.0%}) over {t.span()} steps while reward "
        f"stayed at {_f(level)}: the policy stopped exploring; raise temperature or add an entropy bonus.",
        {"entropy_start": start, "entropy_end": end, "entropy_drop": round(drop, 4), "reward": level},
        0.4 + 0.6 * (drop - ENTROPY_COLLAPSE_DROP) / (1 - ENTROPY_COLLAPSE_DROP),
        {"temperature": "up", "entropy_coef": "up", "learning_rate": "down"})


def _entropy_explosion(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    ent, rewards = t.series(m.ENTROPY), t.series(m.REWARD)
    if not (_comparable(ent) and _comparable(rewards)):
        return None
    start, end = _head(ent), _tail(ent)
    rise = end / start - 1 if start >= ENTROPY_FLOOR else 0.0
    change, band = _stage_shift(rewards)
    if rise < ENTROPY_EXPLOSION_RISE or change > band:
        return None
    return TrainingFinding.make(
        "entropy_explosion",
        f"Entropy rose from {_f(start)} to {_f(end)} nats ({rise:+.0%}) while reward went from "
        f"{_f(_head(rewards))} to {_f(_tail(rewards))}: updates push the policy towards noise; lower the "
        "entropy bonus, the temperature and the learning rate.",
        {"entropy_start": start, "entropy_end": end, "entropy_rise": round(rise, 4), "reward_change": change},
        0.5 + 0.5 * min(1.0, rise / 2),
        {"entropy_coef": "down", "temperature": "down", "learning_rate": "down"})


def _reward_plateau(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    rewards = t.series(m.REWARD)
    if not _comparable(rewards):
        return None
    change, band, rising = _recent_trend(rewards)
    if rising:
        return None
    w, level = _window(len(rewards)), _tail(rewards)
    if level >= SOLVED_REWARD:
        advice, suggests = "the task is solved at this difficulty; raise it", {"difficulty": "up"}
    elif level <= UNSOLVED_REWARD:
        advice, suggests = "too hard to learn from; lower the difficulty and explore more", \
            {"difficulty": "down", "temperature": "up"}
    else:
        advice, suggests = "get more signal per prompt and explore more", \
            {"num_generations": "up", "temperature": "up"}
    return TrainingFinding.make(
        "reward_plateau",
        f"Reward's trend over the last {2 * w} steps is {change:+.3g} per {w} steps (now {_f(level)}), inside "
        f"the noise band of {_f(band)}: the stage stopped improving; {advice}.",
        {"reward_gain_per_window": change, "noise_band": band, "reward": level, "window": w},
        0.35, suggests)


def _zero_signal_groups(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    frac = t.series(m.FRAC_ZERO_STD)
    if not _comparable(frac) or (share := _tail(frac)) < ZERO_STD_HIGH:
        return None
    level = t.reward_level()
    head = f"{share:.0%} of groups had identical rewards"
    if level is not None and level >= SOLVED_REWARD:
        kind, suggests = "groups_all_solved", {"difficulty": "up"}
        text = (f"{head} with reward at {_f(level)}: every sample solves most prompts, no gradient is left; "
                "raise the difficulty.")
    elif level is not None and level <= UNSOLVED_REWARD:
        kind, suggests = "groups_none_solved", {"difficulty": "down", "temperature": "up", "num_generations": "up"}
        text = (f"{head} with reward at {_f(level)}: every sample fails most prompts; lower the difficulty, "
                "raise the temperature and sample more completions per prompt.")
    else:
        kind, suggests = "groups_zero_signal", {"num_generations": "up"}
        reward = _f(level) if level is not None else "not logged"
        text = f"{head} (reward {reward}): sample more completions per prompt."
    evidence = {"frac_reward_zero_std": share} | ({"reward": level} if level is not None else {})
    return TrainingFinding.make(kind, text, evidence, 0.8 * share, suggests)


def _kl_blowup(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    bad, kl = t.nonfinite(m.KL), t.series(m.KL)
    suggests = {"beta": "up", "learning_rate": "down"}
    if bad:
        return TrainingFinding.make(
            "kl_blowup",
            f"KL to the reference was NaN/inf in {bad} of {len(t.train)} steps: the k3 estimate overflowed; "
            "raise beta, lower the learning rate or reset the reference.",
            {"kl_nonfinite_steps": bad, "steps": len(t.train)}, 1.0, suggests)
    if not _comparable(kl) or (level := _tail(kl)) <= KL_HEALTHY_MAX:
        return None
    return TrainingFinding.make(
        "kl_blowup",
        f"KL to the reference reached {_f(level)} (median of the last {_window(len(kl))} steps), above the "
        f"healthy 0.01-{KL_HEALTHY_MAX} band: raise beta and lower the learning rate.",
        {"kl": level, "kl_healthy_max": KL_HEALTHY_MAX},
        0.4 + 0.3 * math.log10(level / KL_HEALTHY_MAX), suggests)


def _truncation(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    clipped = t.series(m.CLIPPED)
    if not _comparable(clipped) or (share := _tail(clipped)) < TRUNCATED_HIGH:
        return None
    cap = f"{config.max_completion_length}-token " if config else ""
    evidence = {"clipped_ratio": share}
    if config:
        evidence["max_completion_length"] = config.max_completion_length
    return TrainingFinding.make(
        "truncation",
        f"{share:.0%} of completions hit the {cap}length cap (median of the last {_window(len(clipped))} "
        "steps): answers are cut before they end; raise max_completion_length.",
        evidence, share, {"max_completion_length": "up"})


def _length_change(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    lengths = t.series(m.LENGTH)
    if not _comparable(lengths) or t.reward_progressing() is not False or (start := _head(lengths)) <= 0:
        return None  # a length change while reward rises is the policy learning, not a pathology
    end = _tail(lengths)
    ratio = end / start
    evidence = {"length_start": start, "length_end": end, "length_ratio": round(ratio, 4)}
    if ratio >= LENGTH_EXPLOSION_RATIO:
        return TrainingFinding.make(
            "length_explosion",
            f"Mean completion length grew from {_f(start)} to {_f(end)} tokens (x{ratio:.1f}) without reward "
            "improving: the policy is rambling; lower the temperature and the learning rate.",
            evidence, 0.3 + 0.1 * min(4.0, ratio), {"temperature": "down", "learning_rate": "down"})
    if ratio <= LENGTH_COLLAPSE_RATIO:
        return TrainingFinding.make(
            "length_collapse",
            f"Mean completion length fell from {_f(start)} to {_f(end)} tokens ({ratio - 1:+.0%}) without "
            "reward improving: short answers are being rewarded; raise max_completion_length.",
            evidence, 0.4 + 0.4 * (1 - ratio), {"max_completion_length": "up"})
    return None


def _sudden_collapse(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    rows = [(i, v) for i, v in enumerate(t.column(m.REWARD)) if v is not None]
    if not _comparable(rows):
        return None
    w = _window(len(rows))
    stride = max(1, w // 8)  # on long traces every eighth window start finds the peak as well
    starts = range(0, len(rows) - 2 * w + 1, stride)
    top, peak = max(((i, statistics.median(v for _, v in rows[i:i + w])) for i in starts), key=lambda p: p[1])
    end = _tail([v for _, v in rows])
    if peak - end < COLLAPSE_DROP or end > COLLAPSE_KEEP * peak:
        return None
    grads, start_row = t.column(m.GRAD_NORM), rows[top][0]
    split = rows[top + w - 1][0]
    before = [g for g in grads[:split + 1] if g is not None]
    after = [g for g in grads[start_row:] if g is not None]
    evidence: dict[str, float | int | str] = {"reward_peak": peak, "reward_end": end, "action": "rollback"}
    score = 0.8 + 0.2 * min(1.0, peak - end)
    if len(before) >= MIN_WINDOW and after and (base := statistics.median(before)) > 0:
        ratio = max(after) / base
        if ratio < GRAD_SPIKE_RATIO:
            return None
        evidence |= {"grad_norm_median": base, "grad_norm_peak": max(after), "grad_spike_ratio": round(ratio, 2)}
        cause = f" with grad_norm spiking to {_f(max(after))} ({ratio:.0f}x its median {_f(base)})"
    else:
        score *= 0.7  # no grad_norm to confirm an instability: a drop alone is weaker evidence
        cause = " (grad_norm not logged)"
    return TrainingFinding.make(
        "sudden_collapse",
        f"Reward collapsed from {_f(peak)} to {_f(end)}{cause}: roll back to the last healthy checkpoint "
        "and lower the learning rate.",
        evidence, score, {"learning_rate": "down", "beta": "up"})


def _eval_pairs(t: _Trace) -> list[tuple[float, float]]:
    """(training-prompt reward, held-out reward) of the evaluation rows, oldest first."""
    return [(tr, ho) for r in t.evals
            if (tr := _number(r.get(m.TRAIN_EVAL_REWARD))) is not None
            and (ho := _number(r.get(m.EVAL_REWARD))) is not None and math.isfinite(tr) and math.isfinite(ho)]


def _train_heldout_gap(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    """The gap at the stage's end, or, when the stage was also evaluated at its start, how much it
    widened during the stage (a gap the stage inherited, e.g. from supervised warm start, is not
    this stage's doing)."""
    pairs = _eval_pairs(t)
    if not pairs:
        return None
    train, heldout = pairs[-1]
    gap = train - heldout
    widened = gap - (pairs[0][0] - pairs[0][1]) if len(pairs) >= 2 else gap
    if widened < GAP_HIGH:
        return None
    anchor = f" (beta is {config.beta})" if config is not None else ""
    since = f", {_f(widened)} more than at the stage's start" if len(pairs) >= 2 else ""
    return TrainingFinding.make(
        "train_heldout_gap",
        f"Reward on training prompts is {_f(train)} but {_f(heldout)} held out (gap {_f(gap)}{since}): the "
        f"policy is fitting the training prompts; raise beta to anchor it to the reference{anchor}.",
        {"train_reward": train, "heldout_reward": heldout, "gap": gap, "gap_widened": widened},
        widened / GAP_FULL_SCORE, {"beta": "up"})


def _heldout_regression(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    """Held-out reward lower at the stage's end than at its start: the updates moved the policy away
    from what generalizes; smaller steps (learning rate) and an anchor (beta) are the usual response."""
    pairs = _eval_pairs(t)
    if len(pairs) < 2:
        return None
    start, end = pairs[0][1], pairs[-1][1]
    drop = start - end
    if drop < max(REGRESSION_MIN, REGRESSION_RELATIVE * start):
        return None
    lr = f" (learning rate {config.learning_rate:g})" if config is not None else ""
    return TrainingFinding.make(
        "heldout_regression",
        f"Held-out reward fell from {_f(start)} to {_f(end)} during the stage{lr}: the updates hurt what "
        "generalizes; lower the learning rate and anchor the policy with a KL term.",
        {"heldout_start": start, "heldout_end": end, "drop": drop}, min(1.0, drop / REGRESSION_FULL_SCORE),
        {"learning_rate": "down", "beta": "up"})


def _clip_saturation(t: _Trace, config: StageConfig | None) -> TrainingFinding | None:
    low, high = t.series(m.CLIP_LOW), t.series(m.CLIP_HIGH)
    region = t.series(m.CLIP_REGION)
    if not _comparable(region):
        pairs = zip(t.column(m.CLIP_LOW), t.column(m.CLIP_HIGH), strict=True)
        region = [a + b for a, b in pairs if a is not None and b is not None]
    if not _comparable(region) or (share := _tail(region)) < CLIP_SATURATED:
        return None
    lo, hi = (_tail(low) if _comparable(low) else 0.0), (_tail(high) if _comparable(high) else 0.0)
    suggests = {"learning_rate": "down"} | ({"epsilon_high": "up"} if hi > lo else {})
    clip = f" for epsilon {config.epsilon}/{config.epsilon_high}" if config else ""
    widen = " or widen clip-high" if hi > lo else ""
    return TrainingFinding.make(
        "clip_saturation",
        f"{share:.0%} of tokens hit the clip range (low {lo:.0%}, high {hi:.0%}): the updates are too large"
        f"{clip}; lower the learning rate{widen}.",
        {"clip_ratio": share, "clip_low": lo, "clip_high": hi}, 0.8 * min(1.0, share / CLIP_FULL_SCORE), suggests)


DETECTORS: tuple[Detector, ...] = (
    _entropy_collapse, _entropy_explosion, _reward_plateau, _zero_signal_groups, _kl_blowup, _truncation,
    _length_change, _sudden_collapse, _train_heldout_gap, _heldout_regression, _clip_saturation,
)


def diagnose(trace: Sequence[Mapping], config: StageConfig | None = None) -> list[TrainingFinding]:
    """Runs every detector over one stage's trace.

    Args:
        trace: per-step metric dicts, oldest first (held-out rows carry ``eval/reward``).
        config: the stage's config, quoted in the guidance where it helps; optional.

    Returns:
        The findings, highest score first; empty for a healthy trace or one with fewer than
        :data:`MIN_STEPS` training rows. Missing keys and NaN/inf values never raise.
    """
    t = _Trace(trace)
    if len(t.train) < MIN_STEPS:
        return []
    findings = [f for detect in DETECTORS if (f := detect(t, config)) is not None]
    return sorted(findings, key=lambda f: -f.score)
