"""Whether a stage still makes progress, and whether its difficulty suits the policy, judged on the
greedy probe's reward (:data:`~loopwise.training.metrics.GREEDY_REWARD`), not the sampled reward.

The sampled reward falls when the temperature rises; read as "too hard" it asked for a higher
temperature and a lower difficulty, which lowered it again. Greedy reward on fixed held-out
prompts at the stage's difficulty moves only when the policy's answers do, and it is what the
search itself scores (greedy reward on the tune split). A trace without probes (a TRL log) gets
none of these findings.

One detector, three findings: ``too_easy`` (the probe is solved, whatever its trend, and the
stage's own answers were not cut at its cap: the probe answers at the task's full answer length,
so a cap that cuts every sampled answer leaves it solved while the stage learns nothing; that is
``truncation``'s call),
``too_hard`` (almost nothing solved and not rising), ``reward_plateau`` (in between and not
rising; the answer depends on whether the groups still carry a reward signal).
"""

from __future__ import annotations

from loopwise.core.records import Finding
from loopwise.training import metrics as m
from loopwise.training import trace_stats as ts
from loopwise.training.config import StageConfig
from loopwise.training.findings import make_finding

__all__ = ["greedy_progress"]


def greedy_progress(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    """``too_easy``, ``too_hard`` or ``reward_plateau`` from the greedy probe, or None."""
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
    trend = (f"its trend over the last {2 * w} probes is {change:+.3g} per {w}, not above the noise band of "
             f"{ts.fmt(band)}")
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
