"""Whether a stage's capacity knobs (group size, completion budget) fit what the policy does, in
both directions: groups without a reward signal ask for more completions per prompt, groups whose
halves would still carry one for fewer; completions cut at the cap ask for a longer cap,
completions that all fit in half of it for a shorter one. A stage whose groups were (almost) all
without reward variance learned nothing from its samples: ``no_learning_signal`` says so, with the
share, and which way back leads (an easier difficulty when nothing was solved, a harder one when
everything was, a higher temperature when each prompt's completions agreed but prompts differed).
When the cap cuts the answers (``truncation``), failing samples are the cap's doing: the stage
without a signal then asks for a longer cap only, and the none-solved groups ask for no more
samples (they would be cut as well).

Lowering a capacity knob is an economy, not a repair: it frees generated samples (or tokens) of
the equal budget for further steps and stages, so those findings score below the pathologies'.
"""

from __future__ import annotations

from loopwise.core.records import Finding
from loopwise.training import metrics as m
from loopwise.training import trace_stats as ts
from loopwise.training.config import StageConfig
from loopwise.training.findings import make_finding
from loopwise.training.learning_signal import NO_SIGNAL_SHARE, zero_variance_share

__all__ = ["CAPACITY_DETECTORS"]

# Half the group would still carry a signal in three groups out of four: the samples a halving
# frees buy more steps than the signal it loses (ours; the up-move needs ZERO_STD_HIGH, twice this,
# so the two never ask for opposite moves on one trace).
HALF_ZERO_STD_LOW = 0.25
ECONOMY_SCORE = 0.3
# Length explosion / collapse: SofT-GRPO #4, EasyR1 #40 and ms-swift #4758 report the pattern,
# not a ratio; a doubling / halving of the mean length within one stage is ours.
LENGTH_EXPLOSION_RATIO = 2.0
LENGTH_COLLAPSE_RATIO = 0.5


def _zero_signal_groups(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    frac = t.series(m.FRAC_ZERO_STD)
    if not ts.comparable(frac) or (share := ts.tail(frac)) < ts.ZERO_STD_HIGH:
        return None
    level = t.reward_level()  # sampled: which way the groups are uniform is a property of sampling
    head = f"{share:.0%} of groups had identical rewards"
    if level is not None and level >= ts.SOLVED_REWARD:
        kind, suggests = "groups_all_solved", {"num_generations": "down"}
        text = (f"{head} with sampled reward at {ts.fmt(level)}: every sample solves most prompts, so the groups "
                "carry no gradient and more samples per prompt would not find one; halve the group (whether the "
                "difficulty rises is the greedy probe's call).")
    elif level is not None and level <= ts.UNSOLVED_REWARD:
        if t.answers_cut():
            return None  # failing because the answers are cut: more samples are cut too (truncation says so)
        kind, suggests = "groups_none_solved", {"num_generations": "up"}
        text = (f"{head} with sampled reward at {ts.fmt(level)}: every sample fails most prompts; sample more "
                "completions per prompt so that a group holds a success.")
    else:
        kind, suggests = "groups_zero_signal", {"num_generations": "up"}
        reward = ts.fmt(level) if level is not None else "not logged"
        text = f"{head} (sampled reward {reward}): sample more completions per prompt."
    evidence = {"frac_reward_zero_std": share} | ({"reward": level} if level is not None else {})
    return make_finding(kind, text, evidence, 0.8 * share, suggests)


def _no_learning_signal(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    """Over the whole stage (not its last window), at least :data:`NO_SIGNAL_SHARE` of the groups
    had no reward variance: its advantages were zero and its samples taught the policy nothing."""
    share, rewards = zero_variance_share(t.train), t.series(m.REWARD)
    if share is None or share < NO_SIGNAL_SHARE or not rewards:
        return None
    level = sum(rewards) / len(rewards)
    if level <= ts.UNSOLVED_REWARD and t.answers_cut():
        cap = f" at the {config.max_completion_length}-token cap" if config is not None else " at the length cap"
        why = f"every sample failed, {t.truncated_share():.0%} of the completions cut{cap}"
        suggests = {"max_completion_length": "up"}
    elif level <= ts.UNSOLVED_REWARD:
        why, suggests = "every sample failed", {"difficulty": "down", "max_completion_length": "up"}
    elif level >= ts.SOLVED_REWARD:
        why, suggests = "every sample solved its prompt", {"difficulty": "up"}
    else:
        why, suggests = "each prompt's completions scored alike", {"temperature": "up"}
    return make_finding(
        "no_learning_signal",
        f"{share:.0%} of the stage's groups had no reward variance (mean sampled reward {ts.fmt(level)}: {why}): its "
        "advantages were zero and it learned nothing from its samples; go back to where the groups disagree.",
        {"zero_variance_share": share, "reward": level}, 0.9 + 0.1 * share, suggests)


def _group_to_spare(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    halves, whole = t.series(m.FRAC_ZERO_STD_HALF), t.series(m.FRAC_ZERO_STD)
    if not (ts.comparable(halves) and ts.comparable(whole)):
        return None
    half, share = ts.tail(halves), ts.tail(whole)
    if half > HALF_ZERO_STD_LOW or share >= ts.ZERO_STD_HIGH:
        return None
    size = f" of {config.num_generations}" if config is not None else ""
    return make_finding(
        "group_to_spare",
        f"Taken apart, the halves of each group{size} had identical rewards in only {half:.0%} of cases (whole groups "
        f"{share:.0%}): half the group size still carries a reward signal in most groups; halve num_generations and "
        "spend the samples on more steps.",
        {"frac_reward_zero_std_half": half, "frac_reward_zero_std": share}, ECONOMY_SCORE,
        {"num_generations": "down"})


def _truncation(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    if not t.answers_cut():
        return None
    share = t.truncated_share()
    cap = f"{config.max_completion_length}-token " if config else ""
    evidence = {"clipped_ratio": share}
    if config:
        evidence["max_completion_length"] = config.max_completion_length
    return make_finding(
        "truncation",
        f"{share:.0%} of completions hit the {cap}length cap (median of the last {ts.window(len(t.series(m.CLIPPED)))} "
        "steps): answers are cut before they end; raise max_completion_length.",
        evidence, share, {"max_completion_length": "up"})


def _short_completions(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    """Every completion of the stage fits in half the cap (none was cut): the cap can halve
    without cutting anything the policy wrote."""
    longest, clipped = t.series(m.MAX_LENGTH), t.series(m.CLIPPED)
    if config is None or not (ts.comparable(longest) and ts.comparable(clipped)):
        return None
    cap, most = config.max_completion_length, max(longest)
    if max(clipped) > 0 or 2 * most > cap:
        return None
    return make_finding(
        "short_completions",
        f"The stage's longest completion had {most:.0f} tokens, at most half the {cap}-token cap, and none was cut: "
        "halve max_completion_length.",
        {"max_length": most, "max_completion_length": cap}, ECONOMY_SCORE, {"max_completion_length": "down"})


def _length_change(t: ts.Trace, config: StageConfig | None) -> Finding | None:
    lengths = t.series(m.LENGTH)
    if not ts.comparable(lengths) or t.reward_progressing() is not False or (start := ts.head(lengths)) <= 0:
        return None  # a length change while reward rises is the policy learning, not a pathology
    end = ts.tail(lengths)
    ratio = end / start
    evidence = {"length_start": start, "length_end": end, "length_ratio": round(ratio, 4)}
    if ratio >= LENGTH_EXPLOSION_RATIO:
        return make_finding(
            "length_explosion",
            f"Mean completion length grew from {ts.fmt(start)} to {ts.fmt(end)} tokens (x{ratio:.1f}) without reward "
            "improving: the policy is rambling; lower the temperature and the learning rate.",
            evidence, 0.3 + 0.1 * min(4.0, ratio), {"temperature": "down", "learning_rate": "down"})
    if ratio <= LENGTH_COLLAPSE_RATIO:
        return make_finding(
            "length_collapse",
            f"Mean completion length fell from {ts.fmt(start)} to {ts.fmt(end)} tokens ({ratio - 1:+.0%}) without "
            "reward improving: short answers are being rewarded; raise max_completion_length.",
            evidence, 0.4 + 0.4 * (1 - ratio), {"max_completion_length": "up"})
    return None


CAPACITY_DETECTORS = (_no_learning_signal, _zero_signal_groups, _group_to_spare, _truncation, _short_completions, _length_change)
