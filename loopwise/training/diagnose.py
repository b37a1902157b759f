"""Pathologies of one GRPO stage, read off its metric trace at the checkpoint.

Each detector looks at the trace (per-step dicts, oldest first, names from
:mod:`loopwise.training.metrics`) and says what it saw as a :class:`~loopwise.core.records.Finding`
(built by :func:`~loopwise.training.findings.make_finding`): one sentence with the numbers, the
numbers themselves, a severity, a score to rank findings against each other, and the knobs the
usual response moves (its ``moves``, :class:`~loopwise.training.findings.KnobMove`), which is the
vocabulary the expert transitions (:mod:`loopwise.training.transitions`) and the LLM proposers share.

Levels are *medians over windows* of a quarter of the stage (at least
:data:`~loopwise.training.trace_stats.MIN_WINDOW` steps),
so one noisy step never decides. Whether reward still rises is a robust (repeated-median) slope
over the last two windows, re-fitted without its worst point before a stall is declared; a change
counts as real only beyond :data:`~loopwise.training.trace_stats.SIGNIFICANCE_Z` standard errors, the noise level being estimated
robustly from step-to-step differences. Over the shortest traces (3-step windows) that reward
test has little power either way; its calls firm up from about 20 steps. A trace with fewer than
:data:`~loopwise.training.trace_stats.MIN_STEPS` training rows is too short to judge and gives no findings. Rewards are assumed
to lie in [0, 1] (verifier rewards such as TinyZero's 0 / 0.1 / 1). Missing keys and NaN/inf
values are skipped, except that a non-finite KL is itself the KL blow-up.

Progress and difficulty are judged on the greedy probe's reward
(:mod:`loopwise.training.diagnose_progress`), group size and completion budget in
:mod:`loopwise.training.diagnose_capacity`; entropy, KL, clipping, collapse and the held-out
checks are here. Every knob a finding moves has findings for either direction, so a schedule's
knob trajectory follows what the traces showed, not a direction built into the rules:

- temperature: up on entropy collapse; down on entropy explosion and length explosion.
- beta: up on KL blow-up, a widening train / held-out gap, held-out regression and sudden
  collapse; down when the KL term holds the policy in place while greedy reward stalls.
- learning_rate: up on a plateau whose groups carry signal (a plateau, like a too-hard task, needs
  evidence of no gain; a probe too small to show it gives ``progress_undecided``, which moves
  nothing); down on the instabilities.
- num_generations: up on zero-signal groups; down on all-solved groups and when half a group
  would still carry a signal.
- a stage whose groups (almost) all lacked reward variance (``no_learning_signal``): difficulty
  down and completion cap up when nothing was solved, difficulty up when everything was,
  temperature up when each prompt's completions agreed.
- max_completion_length: up on truncation and length collapse; down when every completion fits in
  half the cap.
- difficulty: up when the probe is solved and the stage's answers were not cut at its cap (a cap
  that cuts them is ``truncation``, whatever the probe says); down when it is unsolved and shows no
  useful gain.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from loopwise.core.records import Finding
from loopwise.training import metrics as m
from loopwise.training import trace_stats as ts
from loopwise.training.config import StageConfig
from loopwise.training.diagnose_capacity import CAPACITY_DETECTORS
from loopwise.training.diagnose_progress import greedy_progress
from loopwise.training.findings import make_finding

__all__ = ["DETECTORS", "diagnose", "diagnosis_status"]

# -- thresholds, with where the numbers come from (FACTS.md section 8) --------------------------
# Entropy collapse: arXiv 2505.22617 reports -73% entropy in the first 200 steps with 76% of the
# final gain already made; a stage here is tens of steps, so half that fall already fires.
ENTROPY_COLLAPSE_DROP = 0.5
ENTROPY_FLOOR = 0.05  # nats; a start below this has nothing left to collapse (and ratios are noise)
# Entropy explosion: rllm #116 saw training fine below ~1 nat and decline at 2.0 (a doubling);
# +50% over the stage's start with reward not rising fires before the doubling.
ENTROPY_EXPLOSION_RISE = 0.5
# KL: TRL PR #6637 / Gdisbar/RL put healthy per-token k3 KL at 0.01-0.1; the k3 estimate can overflow.
KL_HEALTHY_MAX = 0.1
KL_FLAT_FLOOR = 0.005  # a KL that moved less than this over a stage sits where it is (ours)
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


Detector = Callable[[ts.Trace, "StageConfig | None"], "Finding | None"]


# -- the detectors ------------------------------------------------------------------------------

def _entropy_collapse(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    ent, level = t.series(m.ENTROPY), t.reward_level()
    if not ts.comparable(ent) or level is None:
        return None
    start, end = ts.head(ent), ts.tail(ent)
    if start < ENTROPY_FLOOR or 1 - end / start < ENTROPY_COLLAPSE_DROP:
        return None
    if t.reward_progressing() and level < ts.SOLVED_REWARD:
        return None  # still learning: entropy is being spent on progress
    drop = 1 - end / start
    return make_finding(
        "entropy_collapse",
        f"Entropy fell from {ts.fmt(start)} to {ts.fmt(end)} nats ({-drop:+.0%}) over {t.span()} steps while reward "
        f"stayed at {ts.fmt(level)}: the policy stopped exploring; raise temperature or add an entropy bonus.",
        {"entropy_start": start, "entropy_end": end, "entropy_drop": round(drop, 4), "reward": level},
        0.4 + 0.6 * (drop - ENTROPY_COLLAPSE_DROP) / (1 - ENTROPY_COLLAPSE_DROP),
        {"temperature": "up", "entropy_coef": "up", "learning_rate": "down"})


def _entropy_explosion(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    ent, rewards = t.series(m.ENTROPY), t.series(m.REWARD)
    if not (ts.comparable(ent) and ts.comparable(rewards)):
        return None
    start, end = ts.head(ent), ts.tail(ent)
    rise = end / start - 1 if start >= ENTROPY_FLOOR else 0.0
    change, band = ts.stage_shift(rewards)
    if rise < ENTROPY_EXPLOSION_RISE or change > band:
        return None
    return make_finding(
        "entropy_explosion",
        f"Entropy rose from {ts.fmt(start)} to {ts.fmt(end)} nats ({rise:+.0%}) while reward went from "
        f"{ts.fmt(ts.head(rewards))} to {ts.fmt(ts.tail(rewards))}: updates push the policy towards noise; lower the "
        "entropy bonus, the temperature and the learning rate.",
        {"entropy_start": start, "entropy_end": end, "entropy_rise": round(rise, 4), "reward_change": change},
        0.5 + 0.5 * min(1.0, rise / 2),
        {"entropy_coef": "down", "temperature": "down", "learning_rate": "down"})


def _kl_blowup(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    bad, kl = t.nonfinite(m.KL), t.series(m.KL)
    suggests = {"beta": "up", "learning_rate": "down"}
    if bad:
        return make_finding(
            "kl_blowup",
            f"KL to the reference was NaN/inf in {bad} of {len(t.train)} steps: the k3 estimate overflowed; "
            "raise beta, lower the learning rate or reset the reference.",
            {"kl_nonfinite_steps": bad, "steps": len(t.train)}, 1.0, suggests)
    if not ts.comparable(kl) or (level := ts.tail(kl)) <= KL_HEALTHY_MAX:
        return None
    return make_finding(
        "kl_blowup",
        f"KL to the reference reached {ts.fmt(level)} (median of the last {ts.window(len(kl))} steps), above the "
        f"healthy 0.01-{KL_HEALTHY_MAX} band: raise beta and lower the learning rate.",
        {"kl": level, "kl_healthy_max": KL_HEALTHY_MAX},
        0.4 + 0.3 * math.log10(level / KL_HEALTHY_MAX), suggests)


def _kl_anchor_binding(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    """A KL term holds the policy at a fixed distance from its reference while greedy reward does
    not rise: the anchor, not the reward, decides how far the policy moves."""
    kl = t.series(m.KL)
    if config is None or config.beta <= 0 or not ts.comparable(kl) or t.greedy_progressing() is not False:
        return None
    level = ts.tail(kl)
    change, band = ts.stage_shift(kl, floor=KL_FLAT_FLOOR)
    if level > KL_HEALTHY_MAX or change > band:
        return None  # drifting further (or already too far): the anchor is not what holds it
    return make_finding(
        "kl_anchor_binding",
        f"KL to the reference stays at {ts.fmt(level)} (change {change:+.2g} over the stage, no rise beyond the noise "
        f"band {ts.fmt(band)}) with beta {config.beta:g} while greedy reward is not rising: the KL term holds the "
        "policy in place; lower beta.",
        {"kl": level, "kl_change": change, "noise_band": band, "beta": config.beta}, 0.3, {"beta": "down"})


def _sudden_collapse(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    rows = [(i, v) for i, v in enumerate(t.column(m.REWARD)) if v is not None]
    if not ts.comparable(rows):
        return None
    w = ts.window(len(rows))
    stride = max(1, w // 8)  # on long traces every eighth window start finds the peak as well
    starts = range(0, len(rows) - 2 * w + 1, stride)
    top, peak = max(((i, statistics.median(v for _, v in rows[i:i + w])) for i in starts), key=lambda p: p[1])
    end = ts.tail([v for _, v in rows])
    if peak - end < COLLAPSE_DROP or end > COLLAPSE_KEEP * peak:
        return None
    grads, start_row = t.column(m.GRAD_NORM), rows[top][0]
    split = rows[top + w - 1][0]
    before = [g for g in grads[:split + 1] if g is not None]
    after = [g for g in grads[start_row:] if g is not None]
    evidence: dict[str, float | int | str] = {"reward_peak": peak, "reward_end": end, "action": "rollback"}
    score = 0.8 + 0.2 * min(1.0, peak - end)
    if len(before) >= ts.MIN_WINDOW and after and (base := statistics.median(before)) > 0:
        ratio = max(after) / base
        if ratio < GRAD_SPIKE_RATIO:
            return None
        evidence |= {"grad_norm_median": base, "grad_norm_peak": max(after), "grad_spike_ratio": round(ratio, 2)}
        cause = f" with grad_norm spiking to {ts.fmt(max(after))} ({ratio:.0f}x its median {ts.fmt(base)})"
    else:
        score *= 0.7  # no grad_norm to confirm an instability: a drop alone is weaker evidence
        cause = " (grad_norm not logged)"
    return make_finding(
        "sudden_collapse",
        f"Reward collapsed from {ts.fmt(peak)} to {ts.fmt(end)}{cause}: roll back to the last healthy checkpoint "
        "and lower the learning rate.",
        evidence, score, {"learning_rate": "down", "beta": "up"})


def _eval_pairs(t: ts.Trace) -> list[tuple[float, float]]:
    """(training-prompt reward, held-out reward) of the evaluation rows, oldest first."""
    return [(tr, ho) for r in t.evals
            if (tr := ts.number(r.get(m.TRAIN_EVAL_REWARD))) is not None
            and (ho := ts.number(r.get(m.EVAL_REWARD))) is not None and math.isfinite(tr) and math.isfinite(ho)]


def _train_heldout_gap(t: ts.Trace, config: StageConfig | None) -> Finding | None:
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
    since = f", {ts.fmt(widened)} more than at the stage's start" if len(pairs) >= 2 else ""
    return make_finding(
        "train_heldout_gap",
        f"Reward on training prompts is {ts.fmt(train)} but {ts.fmt(heldout)} held out (gap {ts.fmt(gap)}{since}): the "
        f"policy is fitting the training prompts; raise beta to anchor it to the reference{anchor}.",
        {"train_reward": train, "heldout_reward": heldout, "gap": gap, "gap_widened": widened},
        widened / GAP_FULL_SCORE, {"beta": "up"})


def _heldout_regression(t: ts.Trace, config: StageConfig | None) -> Finding | None:
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
    return make_finding(
        "heldout_regression",
        f"Held-out reward fell from {ts.fmt(start)} to {ts.fmt(end)} during the stage{lr}: the updates hurt what "
        "generalizes; lower the learning rate and anchor the policy with a KL term.",
        {"heldout_start": start, "heldout_end": end, "drop": drop}, min(1.0, drop / REGRESSION_FULL_SCORE),
        {"learning_rate": "down", "beta": "up"})


def _clip_saturation(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    low, high = t.series(m.CLIP_LOW), t.series(m.CLIP_HIGH)
    region = t.series(m.CLIP_REGION)
    if not ts.comparable(region):
        pairs = zip(t.column(m.CLIP_LOW), t.column(m.CLIP_HIGH), strict=True)
        region = [a + b for a, b in pairs if a is not None and b is not None]
    if not ts.comparable(region) or (share := ts.tail(region)) < CLIP_SATURATED:
        return None
    lo, hi = (ts.tail(low) if ts.comparable(low) else 0.0), (ts.tail(high) if ts.comparable(high) else 0.0)
    suggests = {"learning_rate": "down"} | ({"epsilon_high": "up"} if hi > lo else {})
    clip = f" for epsilon {config.epsilon}/{config.epsilon_high}" if config else ""
    widen = " or widen clip-high" if hi > lo else ""
    return make_finding(
        "clip_saturation",
        f"{share:.0%} of tokens hit the clip range (low {lo:.0%}, high {hi:.0%}): the updates are too large"
        f"{clip}; lower the learning rate{widen}.",
        {"clip_ratio": share, "clip_low": lo, "clip_high": hi}, 0.8 * min(1.0, share / CLIP_FULL_SCORE), suggests)


DETECTORS: tuple[Detector, ...] = (
    _entropy_collapse, _entropy_explosion, greedy_progress, _kl_blowup, _kl_anchor_binding, _sudden_collapse,
    _train_heldout_gap, _heldout_regression, _clip_saturation, *CAPACITY_DETECTORS,
)


def diagnose(trace: Sequence[Mapping], config: StageConfig | None = None) -> list[Finding]:
    """Runs every detector over one stage's trace.

    Args:
        trace: per-step metric dicts, oldest first (held-out rows carry ``eval/reward``).
        config: the stage's config, quoted in the guidance where it helps; optional.

    Returns:
        The findings, highest score first; empty for a healthy trace or one with fewer than
        :data:`~loopwise.training.trace_stats.MIN_STEPS` training rows. Missing keys and NaN/inf values never raise.
    """
    t = ts.Trace(trace)
    if len(t.train) < ts.MIN_STEPS:
        return []
    findings = [f for detect in DETECTORS if (f := detect(t, config)) is not None]
    return sorted(findings, key=lambda f: -f.score)


def diagnosis_status(trace: Sequence[Mapping], findings: Sequence[Finding]) -> str:
    """What a stage's diagnosis amounted to, for the record: ``findings``, ``no finding`` (judged
    and healthy) or why it was not judged."""
    rows = len(ts.Trace(trace).train)
    if rows < ts.MIN_STEPS:
        return f"not judged: {rows} training steps, fewer than {ts.MIN_STEPS}"
    return "findings" if findings else "no finding"
