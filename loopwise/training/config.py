"""One GRPO stage's configuration: the knobs a transition changes between stages.

Names follow TRL's GRPOConfig where one exists (``learning_rate``, ``beta`` for the KL coefficient,
``epsilon`` / ``epsilon_high`` for the asymmetric clip range, ``num_generations`` for the group size,
``max_completion_length``, ``temperature``, ``entropy_coef``); ``difficulty`` is the task's knob.
The knobs are split the way LLMZero reads its schedules: *capacity* (how much the policy may
produce and is asked to solve) and *regularization* (how far one update may move it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

CAPACITY = ("max_completion_length", "num_generations", "difficulty")
REGULARIZATION = ("learning_rate", "beta", "entropy_coef", "epsilon", "epsilon_high", "temperature")


class StageConfig(BaseModel):
    """The knobs of one stage. A stage is a fresh trainer started from its parent's weights."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # capacity
    max_completion_length: int = Field(16, ge=1, le=4096, description="tokens a completion may have")
    num_generations: int = Field(8, ge=2, le=256, description="completions per prompt (the group)")
    difficulty: int = Field(1, ge=0, le=1000, description="the task's difficulty knob")
    # regularization
    learning_rate: float = Field(3e-4, gt=0, le=1.0)
    beta: float = Field(0.0, ge=0, le=10.0, description="KL (k3) coefficient to the reference policy")
    entropy_coef: float = Field(0.0, ge=0, le=1.0)
    epsilon: float = Field(0.2, gt=0, le=1.0, description="lower clip range of the ratio")
    epsilon_high: float = Field(0.28, gt=0, le=1.0, description="upper clip range (DAPO's clip-higher)")
    temperature: float = Field(1.0, gt=0, le=5.0)
    # the stage's length and geometry
    steps: int = Field(20, ge=1, le=100_000, description="optimizer steps in the stage")
    prompts_per_step: int = Field(8, ge=1, le=4096)
    num_iterations: int = Field(2, ge=1, le=16, description="updates per batch of completions (TRL's "
                                "num_iterations); from the second on the clip range acts")
    max_grad_norm: float = Field(1.0, gt=0)
    # The KL anchor. ``initial``: the schedule's initial policy (the warm-started base), as in one
    # continuous GRPO run (TRL keeps its initial reference unless sync_ref_model is set), so a
    # staged schedule is anchored where the continuous baseline is and drift accumulated over
    # earlier stages stays visible to the KL detector. ``stage``: the weights the stage starts from
    # (iterative GRPO's reset), under which every stage starts at KL 0.
    kl_reference: Literal["initial", "stage"] = Field("initial", description="the KL term's reference policy")

    @model_validator(mode="after")
    def _clip_order(self) -> "StageConfig":
        if self.epsilon_high < self.epsilon * 0.5:
            raise ValueError(f"epsilon_high {self.epsilon_high} is far below epsilon {self.epsilon}: "
                             "the clip range would be lopsided the wrong way")
        return self

    def changed(self, other: "StageConfig") -> dict[str, tuple]:
        """The knobs that differ, as ``{name: (mine, other's)}``."""
        mine, theirs = self.model_dump(), other.model_dump()
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
