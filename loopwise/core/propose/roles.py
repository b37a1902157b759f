"""The roles of a model in the loop (KernelPro's team): an analyst that reads the verdict and the
profile and picks the next move, a coder that writes the candidate, a repairer that fixes a failed
one, and a reviewer that explains a candidate the judge found suspicious. Each role has its own
prompt and may be played by its own model (``--llm-role-model analyst=MODEL``); a ``RoleRouter``
sends each request to the proposer of its role.

The analyst and the reviewer answer with a JSON object, read here into a ``Plan`` or a ``Review``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loopwise.core.propose._base import (
    FailureReason,
    ProposalFailure,
    ProposalRequest,
    ProposalResult,
    ProposalRole,
    Proposer,
)
from loopwise.errors import UserError

__all__ = ["OPTIONAL_ROLES", "ROLE_NAMES", "REVIEW_VERDICTS", "Plan", "Review", "RoleRouter", "parse_plan",
           "parse_review", "parse_role_models", "parse_roles"]

ROLE_NAMES: dict[str, ProposalRole] = {
    "coder": ProposalRole.IMPROVE, "repairer": ProposalRole.REPAIR,
    "analyst": ProposalRole.ANALYST, "reviewer": ProposalRole.REVIEW,
}
"""The roles by the names the command line uses."""
OPTIONAL_ROLES = ("analyst", "reviewer")
"""Roles a run switches on by name (``--roles``); the coder and the repairer always play."""
REVIEW_VERDICTS = ("honest", "exploit", "unsure")


def parse_roles(text: str) -> tuple[str, ...]:
    """``analyst,reviewer`` as a tuple of optional role names (empty text: none).

    Raises:
        UserError: a name that is not an optional role.
    """
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [n for n in names if n not in OPTIONAL_ROLES]
    if unknown:
        raise UserError(f"--roles {text!r}: {unknown[0]!r} is not a role that can be switched on "
                        f"(expected {', '.join(OPTIONAL_ROLES)})")
    return names


def parse_role_models(values: Iterable[str], enabled: Iterable[str] = OPTIONAL_ROLES) -> dict[str, str]:
    """``["analyst=M1", "reviewer=M2"]`` as ``{"analyst": "M1", "reviewer": "M2"}``.

    Args:
        values: ``ROLE=MODEL`` items, ROLE one of ``coder``, ``repairer``, ``analyst``, ``reviewer``.
        enabled: the optional roles the run switched on; a model for one that is off is a mistake.

    Raises:
        UserError: an item without ``=``, an unknown role, an empty model, a role given twice, or
            a model for an optional role that is off.
    """
    out: dict[str, str] = {}
    for value in values:
        role, sep, model = (part.strip() for part in value.partition("="))
        if not sep or not role or not model:
            raise UserError(f"--llm-role-model {value!r}: expected ROLE=MODEL, e.g. analyst=gpt-5-mini")
        if role not in ROLE_NAMES:
            raise UserError(f"--llm-role-model {value!r}: unknown role {role!r} (expected {', '.join(ROLE_NAMES)})")
        if role in out:
            raise UserError(f"--llm-role-model: the {role} is given twice ({out[role]}, {model})")
        if role in OPTIONAL_ROLES and role not in set(enabled):
            raise UserError(f"--llm-role-model {value!r}: the {role} is off; add --roles {role}")
        out[role] = model
    return out


class RoleRouter(Proposer):
    """Sends each request to the proposer of its role, the others to ``default``.

    Args:
        default: the proposer of every role not in ``by_role``.
        by_role: a proposer per role (e.g. another model for the analyst).
    """

    def __init__(self, default: Proposer, by_role: Mapping[ProposalRole, Proposer]) -> None:
        self.default = default
        self.by_role = dict(by_role)

    def for_role(self, role: ProposalRole) -> Proposer:
        """The proposer that answers requests in ``role``."""
        return self.by_role.get(ProposalRole(role), self.default)

    def propose(self, request: ProposalRequest) -> list[ProposalResult]:
        """Asks the proposer of ``request.role``."""
        return self.for_role(request.role).propose(request)


@dataclass(frozen=True)
class Plan:
    """The analyst's pick for the next step.

    Attributes:
        move: the move to make, in a few words (a move of the engine's vocabulary where it fits).
        rationale: why, from the verdict and the profile.
        tools: the profiling tools or commands it wants run next (may be empty).
    """

    move: str
    rationale: str = ""
    tools: tuple[str, ...] = ()

    def as_text(self) -> str:
        """The plan as the coder's prompt shows it."""
        lines = [f"Move: {self.move}"] + ([f"Why: {self.rationale}"] if self.rationale else [])
        return "\n".join(lines + ([f"Tools it wants run: {', '.join(self.tools)}"] if self.tools else []))


@dataclass(frozen=True)
class Review:
    """The reviewer's reading of a suspicious candidate.

    Attributes:
        verdict: ``honest`` (the speed is real), ``exploit`` (it games the judge) or ``unsure``.
        explanation: what the candidate does and why the reviewer thinks so.
    """

    verdict: str
    explanation: str


def _object(content: str, what: str) -> dict | ProposalFailure:
    try:
        value = json.loads(content)
    except json.JSONDecodeError as exc:
        return ProposalFailure(reason=FailureReason.SYNTAX_ERROR, detail=f"{what}: not JSON ({exc.msg})")
    if not isinstance(value, dict):
        return ProposalFailure(reason=FailureReason.INVALID, detail=f"{what}: a JSON object is expected")
    return value


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def parse_plan(content: str) -> Plan | ProposalFailure:
    """The analyst's JSON answer ``{"move": ..., "rationale": ..., "tools": [...]}`` as a ``Plan``,
    or a failure naming what is missing."""
    value = _object(content, "the analyst's answer")
    if isinstance(value, ProposalFailure):
        return value
    move = _text(value.get("move"))
    if not move:
        return ProposalFailure(reason=FailureReason.INVALID, detail='the analyst\'s answer has no "move"')
    tools = value.get("tools") or ()
    tools = tuple(str(t) for t in tools) if isinstance(tools, (list, tuple)) else (str(tools),)
    return Plan(move=move, rationale=_text(value.get("rationale")), tools=tools)


def parse_review(content: str) -> Review | ProposalFailure:
    """The reviewer's JSON answer ``{"verdict": "honest|exploit|unsure", "explanation": ...}`` as a
    ``Review``, or a failure naming what is wrong."""
    value = _object(content, "the reviewer's answer")
    if isinstance(value, ProposalFailure):
        return value
    verdict, explanation = _text(value.get("verdict")).lower(), _text(value.get("explanation"))
    if verdict not in REVIEW_VERDICTS or not explanation:
        return ProposalFailure(reason=FailureReason.INVALID,
                               detail=f'the reviewer\'s answer needs "verdict" ({", ".join(REVIEW_VERDICTS)}) '
                                      'and "explanation"')
    return Review(verdict=verdict, explanation=explanation)
