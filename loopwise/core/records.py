"""The records every engine shares: how an evaluation ended, and what a diagnosis found.

``Status`` is the outcome of measuring one candidate (failure is a value). A ``Finding`` is one
diagnosis in plain language with the numbers behind it, a severity, a score that ranks it against
findings of other tools, and the moves it suggests. Moves are the engine's own typed values (a
kernel rewrite, a training knob turned up); core keeps them as they are and never reads them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["SEVERITIES", "Finding", "Severity", "Status", "severity_for"]


class Status(StrEnum):
    """How the evaluation of a candidate ended. Everything but ``CORRECT`` is a failure."""

    CORRECT = "correct"
    WRONG_OUTPUT = "wrong_output"
    COMPILE_ERROR = "compile_error"
    TIMEOUT = "timeout"
    CRASH = "crash"
    OOM = "oom"
    EXPLOIT = "exploit"


Severity = Literal["info", "low", "medium", "high"]
SEVERITIES: tuple[Severity, ...] = ("info", "low", "medium", "high")


def severity_for(score: float) -> Severity:
    """Severity band of a score: the score is the estimated fraction of what is at stake (time,
    reward, correctness) that acting on the finding recovers, and the bands are where a person
    should start reading."""
    if score >= 0.6:
        return "high"
    if score >= 0.3:
        return "medium"
    if score >= 0.1:
        return "low"
    return "info"


class Finding(BaseModel):
    """What one diagnosis tool (a profiling tool, a training-trace detector) saw.

    Attributes:
        tool: the name of the tool or detector that found it.
        guidance: one sentence in plain language, with the numbers that justify it.
        evidence: those numbers (and a few flags), by name.
        severity: ``info`` < ``low`` < ``medium`` < ``high``.
        score: 0..1, ranks findings of different tools against each other.
        moves: what to try, in the engine's own move vocabulary (kept opaque here).
    """

    model_config = ConfigDict(frozen=True)

    tool: str
    guidance: str
    evidence: dict[str, float | int | str | bool] = Field(default_factory=dict)
    severity: Severity
    score: float = Field(ge=0.0, le=1.0)
    moves: tuple[Any, ...] = ()

    @field_validator("guidance")
    @classmethod
    def _guidance_present(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a finding needs a sentence of guidance")
        return value
