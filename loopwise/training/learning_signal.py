"""Whether a stage's configuration leaves GRPO anything to learn from.

A completion's advantage is its reward against its group's (the completions of one prompt); a
group whose completions all score the same has advantage 0 everywhere and gives the policy-gradient
term nothing. A stage in which (almost) every group is uniform spends its samples and learns
nothing from them: the difficulty is beyond the policy (every completion fails), the completion cap
cuts every answer, the temperature makes every sample noise, or the prompts are all solved.

- :func:`zero_variance_share` reads that share off a stage's metric trace (each step's
  ``frac_reward_zero_std``; every step of a stage has the same number of groups);
- :class:`GroupTally` counts uniform groups over the stages a method trained, for its report;
- :func:`probe` samples one step's prompts from a checkpoint under a new config without training:
  the search's check, before a transition is applied, that the next stage can learn anything.
  It draws what that stage's first step draws; a rejected probe's samples count in the method's
  budget, an admitted one's are the stage's first step
  (:meth:`~loopwise.training.session.Session.probe_signal`);
- :func:`sampling_changed`: whether a transition changes what the next stage samples and how it is
  scored (otherwise the parent's own trace already tells, and no probe is needed).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from loopwise.training import metrics as m
from loopwise.training.compute import Compute
from loopwise.training.config import StageConfig

__all__ = ["NO_SIGNAL_SHARE", "SAMPLING_KNOBS", "GroupTally", "SignalProbe", "probe", "sampling_changed",
           "stage_groups", "zero_variance_share"]

# At this share of uniform groups a stage trains on a tenth of its samples or less; a probe of one
# step's 8 prompts (the cpu preset's) reaches it only when all 8 groups are uniform (ours).
NO_SIGNAL_SHARE = 0.9
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


@dataclass(frozen=True)
class SignalProbe:
    """One step's sampling under a config, from a checkpoint, without an update.

    Attributes:
        config: the config probed.
        groups: prompts sampled (one group each).
        zero_variance: groups whose rewards were all equal.
        reward: mean reward of the completions.
        compute: the completions generated and their tokens.
    """

    config: StageConfig
    groups: int
    zero_variance: int
    reward: float
    compute: Compute

    @property
    def share(self) -> float:
        return self.zero_variance / self.groups

    @property
    def learnable(self) -> bool:
        """Whether fewer than :data:`NO_SIGNAL_SHARE` of the groups were uniform."""
        return self.share < NO_SIGNAL_SHARE

    def describe(self) -> str:
        return (f"{self.zero_variance} of {self.groups} probe groups ({self.share:.0%}) had no reward variance "
                f"(mean reward {self.reward:.3f})")

    def to_dict(self) -> dict:
        return {"config": self.config.model_dump(), "groups": self.groups, "zero_variance": self.zero_variance,
                "share": self.share, "reward": self.reward, "learnable": self.learnable,
                "samples": self.compute.samples, "tokens": self.compute.tokens}

    @classmethod
    def from_dict(cls, data: dict) -> SignalProbe:
        return cls(StageConfig.model_validate(data["config"]), data["groups"], data["zero_variance"], data["reward"],
                   Compute(data["samples"], data["tokens"]))


def probe(policy, vocab, task, pool: Sequence, config: StageConfig, seed: int) -> SignalProbe:
    """Samples ``config.prompts_per_step`` prompts of ``pool`` (drawn with ``seed``), a group of
    ``config.num_generations`` completions each, from ``policy`` as it is, and counts the groups
    without reward variance. The policy is not updated."""
    import torch

    from loopwise.training.grpo import sample_groups, uniform_groups

    rng = random.Random(seed)
    examples = [pool[rng.randrange(len(pool))] for _ in range(config.prompts_per_step)]
    generator = torch.Generator(device=next(policy.parameters()).device)
    generator.manual_seed(seed)
    with torch.no_grad():
        s, groups = sample_groups(policy, vocab, task, examples, config, generator)
    return SignalProbe(config, len(examples), int(uniform_groups(groups).sum()), float(groups.mean()),
                       Compute(len(s.texts), int(s.completion_mask.sum())))
