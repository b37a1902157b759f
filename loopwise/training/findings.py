"""The training engine's findings: core findings whose moves turn stage-config knobs up or down.

A detector's finding is a :class:`~loopwise.core.records.Finding` whose ``tool`` is the pathology
(e.g. ``entropy_collapse``) and whose ``moves`` are :class:`KnobMove` values, the vocabulary the
expert transitions and the LLM proposers share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple

from loopwise.core.records import Finding, Severity
from loopwise.training.config import CAPACITY, REGULARIZATION

if TYPE_CHECKING:
    from loopwise.core.propose import FindingNote

__all__ = ["KNOBS", "SEVERITIES", "KnobMove", "as_note", "make_finding", "severity_for", "suggests", "training_finding"]

KNOBS = CAPACITY + REGULARIZATION  # what a move may name
SEVERITIES: tuple[Severity, ...] = ("low", "medium", "high")  # a training finding is never only ``info``
Direction = Literal["up", "down"]


class KnobMove(NamedTuple):
    """One knob of the next stage's config, turned up or down."""

    knob: str
    direction: Direction


def severity_for(score: float) -> Severity:
    """Severity band of a score (the kernel engine's bands, with ``info`` folded into ``low``)."""
    return "high" if score >= 0.6 else "medium" if score >= 0.3 else "low"


def training_finding(kind: str, guidance: str, evidence: Mapping[str, float | int | str] | None = None,
                     severity: Severity = "low", score: float = 0.0,
                     suggests: Mapping[str, str] | None = None) -> Finding:
    """A finding of one detector.

    Args:
        kind: the pathology, e.g. ``entropy_collapse`` (the finding's ``tool``).
        guidance: one plain sentence with the numbers and the usual response.
        evidence: the numbers behind it, by name.
        severity: ``low`` < ``medium`` < ``high``.
        score: 0..1, for ranking findings of different detectors.
        suggests: ``{StageConfig knob: "up" | "down"}``, the usual response (the finding's moves).

    Raises:
        ValueError: a bad severity or score, empty guidance, or a move on an unknown knob or in
            an unknown direction.
    """
    suggests = dict(suggests or {})
    bad = {k: v for k, v in suggests.items() if k not in KNOBS or v not in ("up", "down")}
    if bad:
        raise ValueError(f"suggests {bad} must map knobs {KNOBS} to 'up' or 'down'")
    if severity not in SEVERITIES:
        raise ValueError(f"bad severity {severity!r}: one of {SEVERITIES}")
    return Finding(tool=kind, guidance=guidance, evidence=dict(evidence or {}), severity=severity, score=score,
                   moves=tuple(KnobMove(k, v) for k, v in suggests.items()))


def make_finding(kind: str, guidance: str, evidence: Mapping[str, float | int | str], score: float,
                 suggests: Mapping[str, str]) -> Finding:
    """A finding whose score is clamped to 0..1 and rounded, and whose severity follows it."""
    score = round(min(1.0, max(0.0, score)), 4)
    evidence = {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in evidence.items()}
    return training_finding(kind, guidance, evidence, severity_for(score), score, suggests)


def suggests(finding: Finding) -> dict[str, str]:
    """The finding's moves as ``{knob: "up" | "down"}``, in order."""
    return {move.knob: move.direction for move in finding.moves}


def as_note(finding: Finding) -> FindingNote:
    """The finding as a proposer reads it: the guidance as text; kind, severity, score, the
    evidence and the suggested knob moves as evidence."""
    from loopwise.core.propose import FindingNote

    moves = ", ".join(f"{k} {v}" for k, v in suggests(finding).items())
    evidence = {"kind": finding.tool, "severity": finding.severity, "score": finding.score, **finding.evidence}
    return FindingNote(text=finding.guidance, evidence=evidence | ({"suggests": moves} if moves else {}))
