"""Whether a stage still makes progress, and whether its difficulty suits the policy, judged on the
greedy probe's reward (:data:`~loopwise.training.metrics.GREEDY_REWARD`), not the sampled reward.

The sampled reward falls when the temperature rises; read as "too hard" it asked for a higher
temperature and a lower difficulty, which lowered it again. Greedy reward on fixed held-out
prompts at the stage's difficulty moves only when the policy's answers do, and it is what the
search itself scores (greedy reward on the tune split). A trace without probes (a TRL log) gets
none of these findings.

One detector, four findings: ``too_easy`` (the probe is solved, whatever its trend, and the
stage's own answers were not cut at its cap: the probe answers at the task's full answer length,
so a cap that cuts every sampled answer leaves it solved while the stage learns nothing; that is
``truncation``'s call), ``too_hard`` (almost nothing solved and no useful gain), ``reward_plateau``
(in between and no useful gain; the advice depends on whether the groups still carry a reward
signal), and ``progress_undecided`` (no move: the probe is too small, or too noisy, to tell a stall
from slow learning).

A stall is a claim of *no gain*, so it needs evidence of one, not merely the absence of a
significant rise: the upper end of a 95% interval on the gain per window must lie below
:data:`MIN_USEFUL_GAIN`. The interval holds two errors: the trend's, from the step-to-step noise,
and the probe's, from scoring the policy on a few fixed prompts: a gain ``g`` that comes from a
share ``g`` of the task's prompts turning from wrong to right shows on ``n`` probe prompts with a
standard error ``sqrt(g (1 - g) / n)``, taken at ``g`` = :data:`MIN_USEFUL_GAIN`. A probe whose
size the trace does not give (``greedy_prompts``) cannot prove a stall.
"""

from __future__ import annotations

import math

from loopwise.core.records import Finding
from loopwise.training import metrics as m
from loopwise.training import trace_stats as ts
from loopwise.training.config import StageConfig
from loopwise.training.findings import make_finding

__all__ = ["MIN_USEFUL_GAIN", "greedy_progress"]

MIN_USEFUL_GAIN = 0.05  # greedy reward per window (a quarter stage): a fifth of the range per stage at that pace
Z95 = 1.96  # two-sided 95%: the interval's upper end is a one-sided 97.5% bound


def gain_upper_bound(greedy: list[float], prompts: int | None) -> float | None:
    """The upper end of the 95% interval on the probe's gain per window over the last two windows;
    None when the probe's size is unknown."""
    if prompts is None or prompts < 1:
        return None
    gain, trend_se = ts.recent_gain(greedy)
    probe_se = math.sqrt(MIN_USEFUL_GAIN * (1 - MIN_USEFUL_GAIN) / prompts)
    return round(gain, 6) + Z95 * math.hypot(trend_se, probe_se)


def greedy_progress(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    """``too_easy``, ``too_hard``, ``reward_plateau`` or ``progress_undecided`` from the greedy
    probe, or None (rising, or no probe)."""
    greedy = t.series(m.GREEDY_REWARD)
    if not ts.comparable(greedy):
        return None
    change, band, rising = ts.recent_trend(greedy)
    change = round(change, 6) + 0.0  # a flat quantized probe gives +-1e-17, which reads as a trend
    w, level = ts.window(len(greedy)), ts.tail(greedy)
    at = f" at difficulty {config.difficulty}" if config is not None else ""
    evidence = {"greedy_reward": level, "greedy_gain_per_window": change, "noise_band": band, "window": w}
    cut = t.truncated_share()
    if cut is not None:
        evidence["clipped_ratio"] = cut
    if level >= ts.SOLVED_REWARD:
        if t.answers_cut():
            return None
        return make_finding(
            "too_easy",
            f"Greedy reward on held-out prompts{at} is {ts.fmt(level)} (median of the last {w} probes): the policy "
            "solves this difficulty; raise it.",
            evidence, 0.5 + 0.5 * (level - ts.SOLVED_REWARD) / (1 - ts.SOLVED_REWARD), {"difficulty": "up"})
    if rising:
        return None
    sizes = t.series(m.GREEDY_PROMPTS)
    prompts = int(sizes[-1]) if sizes else None
    upper = gain_upper_bound(greedy, prompts)
    evidence |= {"probe_prompts": prompts if prompts is not None else "unknown", "min_useful_gain": MIN_USEFUL_GAIN}
    if upper is not None:
        evidence["gain_upper_95"] = upper
    if upper is None or upper >= MIN_USEFUL_GAIN:
        return _undecided(level, change, upper, prompts, at, evidence)
    return _stall(t, level, change, upper, w, at, evidence)


def _undecided(level: float, change: float, upper: float | None, prompts: int | None, at: str,
               evidence: dict) -> Finding:
    """The probe cannot tell a stall from slow learning: say so, and ask for nothing."""
    why = ("the trace does not say how many prompts the probe scored" if upper is None else
           f"a gain of up to {ts.fmt(upper)} per window (95% upper end, {prompts} probe prompts) is as consistent "
           f"with it as none")
    return make_finding(
        "progress_undecided",
        f"Greedy reward on held-out prompts{at} is {ts.fmt(level)}, its trend {change:+.3g} per window: not a "
        f"significant rise, but no evidence of a stall either ({why}; a stall needs the upper end below "
        f"{ts.fmt(MIN_USEFUL_GAIN)}). Neither a plateau nor a too-hard task is claimed.",
        evidence, 0.0, {})


def _stall(t: ts.Trace, level: float, change: float, upper: float, w: int, at: str, evidence: dict) -> Finding:
    """``too_hard`` or ``reward_plateau``: the gain's interval lies below the minimum useful gain."""
    trend = (f"its trend over the last {2 * w} probes is {change:+.3g} per {w}, at most {ts.fmt(upper)} (95% upper "
             f"end), below a useful {ts.fmt(MIN_USEFUL_GAIN)}")
    if level <= ts.UNSOLVED_REWARD:
        return make_finding(
            "too_hard",
            f"Greedy reward on held-out prompts{at} is {ts.fmt(level)} and {trend}: too hard to learn from; lower "
            "the difficulty.",
            evidence, 0.5, {"difficulty": "down"})
    zero = t.series(m.FRAC_ZERO_STD)
    starved = ts.comparable(zero) and ts.tail(zero) >= ts.ZERO_STD_HIGH
    if starved:
        advice, suggests = "most groups carry no reward signal: sample more completions per prompt", \
            {"num_generations": "up"}
    else:
        advice, suggests = "the groups carry a signal but the policy's answers do not move: take larger steps", \
            {"learning_rate": "up"}
    return make_finding(
        "reward_plateau",
        f"Greedy reward on held-out prompts{at} stays at {ts.fmt(level)}: {trend}; {advice}.",
        evidence | ({"frac_reward_zero_std": ts.tail(zero)} if ts.comparable(zero) else {}), 0.35, suggests)
