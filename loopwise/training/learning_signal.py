"""Whether a stage's configuration leaves GRPO anything to learn from.

A completion's advantage is its reward against its group's (the completions of one prompt); a
group whose completions all score the same has advantage 0 everywhere and gives the policy-gradient
term nothing. A stage in which (almost) every group is uniform spends its samples and learns
nothing from them: the difficulty is beyond the policy (every completion fails), the completion cap
cuts every answer, the temperature makes every sample noise, or the prompts are all solved.

- :func:`zero_variance_share` reads that share off a stage's metric trace (each step's
  ``frac_reward_zero_std``; every step of a stage has the same number of groups);
- :class:`GroupTally` counts uniform groups over the stages a method trained, for its report;
- :func:`probe` samples a stage's first step from a checkpoint under a new config without training:
  the search's check, before a transition is applied, that the next stage can learn anything;
- :func:`sampling_changed`: whether a transition changes what the next stage samples and how it is
  scored (otherwise the parent's own trace already tells, and no probe is needed).

A probe stops a transition only on evidence. A group is uniform by chance even when the task is
learnable (a group of 2 at pass rate p agrees with probability p^2 + (1-p)^2: half the time at
p = 0.5), so the probe's count of uniform groups is read as a binomial sample of the stage's groups:
the transition is stopped when the one-sided :data:`CONFIDENCE` (Clopper-Pearson) lower bound on the
stage's share of uniform groups reaches :data:`NO_SIGNAL_SHARE` (:func:`uniform_share_bound`). The
bound assumes nothing about the pass rates (prompts may differ), and a stage whose share is below
:data:`NO_SIGNAL_SHARE` is stopped with probability at most ``1 - CONFIDENCE``. It needs
:data:`DECISION_GROUPS` groups at least (all of them uniform), whatever the group size, so a probe
samples the first step and, while a stop is still possible, tops it up with further prompts to that
many groups (:func:`probe_groups`); it is taken only where a stop saves at least what a top-up that
admits the transition costs. Its samples count in the method's budget, except the first step's
when the transition is admitted: those are the stage's first step
(:meth:`~loopwise.training.session.Session.probe_signal`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from loopwise.training import metrics as m
from loopwise.training.compute import Compute
from loopwise.training.config import StageConfig

__all__ = ["CONFIDENCE", "DECISION_GROUPS", "NO_SIGNAL_SHARE", "SAMPLING_KNOBS", "GroupTally", "SignalProbe", "probe",
           "probe_groups", "sampling_changed", "stage_groups", "uniform_share_bound", "zero_variance_share"]

# At this share of uniform groups a stage trains on a tenth of its samples or less (ours).
NO_SIGNAL_SHARE = 0.9
CONFIDENCE = 0.95  # of a probe's verdict that a stage would have no signal
# the fewest groups whose being all uniform puts the share at NO_SIGNAL_SHARE or more with
# CONFIDENCE: NO_SIGNAL_SHARE ** groups <= 1 - CONFIDENCE (29)
DECISION_GROUPS = math.ceil(math.log(1 - CONFIDENCE) / math.log(NO_SIGNAL_SHARE))
# the knobs that decide what a step samples (prompts, group, length cap, temperature) and how it is
# scored (the difficulty); the others change only the update
SAMPLING_KNOBS = ("difficulty", "temperature", "max_completion_length", "num_generations", "prompts_per_step")


def _train_rows(trace: Sequence) -> list[float]:
    out = []
    for row in trace:
        value = row.get(m.FRAC_ZERO_STD) if isinstance(row, dict) and m.REWARD in row else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
            out.append(float(value))
    return out


def zero_variance_share(trace: Sequence) -> float | None:
    """The share of a stage's groups whose rewards were all equal, None when its trace has no such
    metric (a TRL log without it)."""
    rows = _train_rows(trace)
    return sum(rows) / len(rows) if rows else None


@dataclass(frozen=True)
class GroupTally:
    """Groups a method's stages sampled, and how many of them were uniform (no reward variance)."""

    zero: int = 0
    groups: int = 0

    def __add__(self, other: GroupTally) -> GroupTally:
        return GroupTally(self.zero + other.zero, self.groups + other.groups)

    def __sub__(self, other: GroupTally) -> GroupTally:
        return GroupTally(self.zero - other.zero, self.groups - other.groups)

    @property
    def share(self) -> float | None:
        return self.zero / self.groups if self.groups else None

    def to_dict(self) -> dict:
        return {"zero": self.zero, "groups": self.groups, "share": self.share}


def stage_groups(trace: Sequence, config: StageConfig) -> GroupTally:
    """A stage's groups (``prompts_per_step`` per training step) and its uniform ones."""
    rows = _train_rows(trace)
    per_step = config.prompts_per_step
    return GroupTally(round(sum(rows) * per_step), len(rows) * per_step)


def sampling_changed(old: StageConfig, new: StageConfig) -> bool:
    """Whether ``new`` samples or scores differently from ``old`` (one of :data:`SAMPLING_KNOBS`)."""
    return any(getattr(old, k) != getattr(new, k) for k in SAMPLING_KNOBS)


def _log_term(k: int, n: int, p: float) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


def _at_least(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), 0 < p < 1 (terms in logs: no overflow at any n)."""
    return math.fsum(math.exp(_log_term(i, n, p)) for i in range(k, n + 1))


def uniform_share_bound(uniform: int, groups: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided ``confidence`` lower bound on a stage's share of uniform groups when
    ``uniform`` of ``groups`` sampled ones were (Clopper-Pearson: the share at which seeing that
    many or more has probability ``1 - confidence``)."""
    alpha = 1 - confidence
    if uniform <= 0:
        return 0.0
    if uniform >= groups:
        return alpha ** (1 / groups)
    low, high = 0.0, 1.0
    for _ in range(60):  # P(X >= uniform) rises with the share
        mid = (low + high) / 2
        low, high = (mid, high) if _at_least(uniform, groups, mid) < alpha else (low, mid)
    return (low + high) / 2


def probe_groups(config: StageConfig) -> int | None:
    """The groups a signal probe of a stage of ``config`` samples to reach a verdict: its first
    step's, topped up to :data:`DECISION_GROUPS`. None when such a probe does not pay for itself:
    the groups a stop saves (the stage's others) are fewer than those a top-up adds when the
    transition is admitted after all."""
    first = config.prompts_per_step
    groups = max(first, DECISION_GROUPS)
    return groups if config.steps * first - groups >= groups - first else None


@dataclass(frozen=True)
class SignalProbe:
    """A stage's first step sampled under a config, from a checkpoint, without an update, and the
    further groups (if any) a verdict needed.

    Attributes:
        config: the config probed.
        groups: prompts sampled (one group each).
        zero_variance: groups whose rewards were all equal.
        reward: mean reward of the completions.
        compute: the completions generated and their tokens, all of them.
        first: those of the first step (the stage's first step; ``compute`` when nothing was added).
    """

    config: StageConfig
    groups: int
    zero_variance: int
    reward: float
    compute: Compute
    first: Compute | None = field(default=None)

    def __post_init__(self) -> None:
        if self.first is None:
            object.__setattr__(self, "first", self.compute)

    @property
    def share(self) -> float:
        return self.zero_variance / self.groups

    @property
    def share_bound(self) -> float:
        """The :data:`CONFIDENCE` lower bound on the stage's share of uniform groups."""
        return uniform_share_bound(self.zero_variance, self.groups)

    @property
    def learnable(self) -> bool:
        """False when, at :data:`CONFIDENCE`, at least :data:`NO_SIGNAL_SHARE` of the stage's groups
        would have no reward variance."""
        return self.share_bound < NO_SIGNAL_SHARE

    def describe(self) -> str:
        text = (f"{self.zero_variance} of {self.groups} probe groups ({self.share:.0%}) had no reward variance "
                f"(mean reward {self.reward:.3f})")
        if self.learnable:
            return text
        return (f"{text}: at {CONFIDENCE:.0%} confidence at least {NO_SIGNAL_SHARE:.0%} of the stage's groups "
                "would have none")

    def to_dict(self) -> dict:
        return {"config": self.config.model_dump(), "groups": self.groups, "zero_variance": self.zero_variance,
                "share": self.share, "share_bound": self.share_bound, "reward": self.reward,
                "learnable": self.learnable, "samples": self.compute.samples, "tokens": self.compute.tokens,
                "first_samples": self.first.samples, "first_tokens": self.first.tokens}

    @classmethod
    def from_dict(cls, data: dict) -> SignalProbe:
        compute = Compute(data["samples"], data["tokens"])
        first = Compute(data["first_samples"], data["first_tokens"]) if "first_samples" in data else compute
        return cls(StageConfig.model_validate(data["config"]), data["groups"], data["zero_variance"], data["reward"],
                   compute, first)


def probe(policy, vocab, task, pool: Sequence, config: StageConfig, seed: int,
          groups: int | None = None) -> SignalProbe:
    """Samples the first step of a stage of ``config`` from ``policy`` as it is: its
    ``config.prompts_per_step`` prompts of ``pool`` (drawn with ``seed``), a group of
    ``config.num_generations`` completions each, and counts the groups without reward variance;
    then, while a stop is still possible, further prompts up to ``groups`` (:func:`probe_groups`).
    The policy is not updated."""
    import torch

    from loopwise.training.grpo import sample_groups, uniform_groups

    rng = random.Random(seed)
    generator = torch.Generator(device=next(policy.parameters()).device)
    generator.manual_seed(seed)

    def draw(n: int) -> tuple[int, float, Compute]:  # uniform groups, reward sum, compute
        examples = [pool[rng.randrange(len(pool))] for _ in range(n)]
        with torch.no_grad():
            s, rewards = sample_groups(policy, vocab, task, examples, config, generator)
        return int(uniform_groups(rewards).sum()), float(rewards.sum()), Compute(len(s.texts), int(s.completion_mask.sum()))

    n = config.prompts_per_step
    uniform, total, first = draw(n)
    compute, rest = first, max(0, (groups or n) - n)
    if rest and uniform_share_bound(uniform + rest, n + rest) >= NO_SIGNAL_SHARE:
        more, more_total, more_compute = draw(rest)
        uniform, total, compute, n = uniform + more, total + more_total, compute + more_compute, n + rest
    return SignalProbe(config, n, uniform, total / compute.samples, compute, first)
