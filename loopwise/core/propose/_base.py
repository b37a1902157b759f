"""The proposer role: frozen requests in, proposals (or typed failures) out, for every engine."""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

EXCHANGE_TIMEOUT_S = 3600.0  # how long an exchange waits for the answers of one step, unless told


class FailureReason(enum.StrEnum):
    """Why a proposal attempt gave no usable content; recorded as is, never raised."""

    NO_CODE = "no_code"
    TRUNCATED = "truncated"
    SYNTAX_ERROR = "syntax_error"
    API_ERROR = "api_error"
    TIMEOUT = "timeout"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INVALID = "invalid"  # the reply parsed, but the engine cannot use what it says (e.g. an unknown knob)


REPROMPTABLE = frozenset({FailureReason.NO_CODE, FailureReason.TRUNCATED, FailureReason.SYNTAX_ERROR,
                          FailureReason.INVALID})
"""Failures answered by asking again with what was wrong (a malformed answer, not a lost call)."""
REPROMPT_ROUNDS = 2
"""How many times, within one step, answers that failed so are asked again (every engine)."""


class ProposalRole(enum.StrEnum):
    """What a request asks for; each role has its own user prompt in the engine's prompt folder
    (``<role>.md.j2``, ``user.md.j2`` for ``IMPROVE``). A proposer may decline a role it does not play by
    answering with ``ProposalFailure``s.

    ``IMPROVE`` and ``REPAIR`` are answered with the engine's content (code, a config); ``ANALYST``
    and ``REVIEW`` with a JSON object (``answers_in_json``): the analyst's is the move it picks and
    why, the reviewer's its reading of a suspicious candidate."""

    IMPROVE = "improve"  # a faster version of a correct candidate (or a first one)
    REPAIR = "repair"  # a fixed version of a candidate the judge failed
    ANALYST = "analyst"  # reads the verdict and profile and picks the next move: {"move", "rationale", ...}
    REVIEW = "review"  # explains a candidate the judge flagged or rejected as an exploit: {"verdict", "explanation"}

    @property
    def answers_in_json(self) -> bool:
        """Whether a reply in this role carries a JSON object whatever the engine's own reply format."""
        return self in (ProposalRole.ANALYST, ProposalRole.REVIEW)


@dataclass(frozen=True, kw_only=True)
class FindingNote:
    """One diagnosis finding as the proposer sees it.

    Attributes:
        text: the finding in plain words, e.g. "memory-bound: 38% of DRAM peak".
        evidence: the numbers behind it (JSON-like values), shown to the proposer.
    """

    text: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "evidence", MappingProxyType(dict(self.evidence)))


@dataclass(frozen=True, kw_only=True)
class Snippet:
    """A piece of reference code offered to the proposer (an example, a known-good kernel).

    Attributes:
        title: what the snippet is, in a few words.
        code: the source text.
        language: the fence language, e.g. ``python``.
    """

    title: str
    code: str
    language: str = "python"


@dataclass(frozen=True, kw_only=True)
class Image:
    """A picture sent with a request to a model that accepts images (e.g. a plot of metric traces).

    Attributes:
        data: the encoded image.
        media_type: its MIME type (``image/png``).
        caption: what it shows, in one line.
    """

    data: bytes
    media_type: str = "image/png"
    caption: str = ""


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """An earlier candidate shown beside the current one: the best so far, or a sibling (another
    child of the same parent) with what it tried and how it was judged.

    Attributes:
        label: which candidate it is, e.g. ``node 4``.
        summary: its move and its verdict in one line, e.g. ``tiled 2D: correct, 1.31x over eager``.
        code: its source, possibly trimmed to a budget; empty to show the summary alone.
    """

    label: str
    summary: str
    code: str = ""


@dataclass(frozen=True, kw_only=True)
class ProposalRequest:
    """Everything a proposer is told about one step of a search.

    Attributes:
        task: the problem statement (for kernels, the reference ``Model`` source and what to beat).
        candidate: the current candidate's source (or content) to improve on; may be empty.
        candidate_summary: a one-paragraph description of the current candidate.
        evaluation: a summary of how the current candidate was judged (correctness, times).
        findings: what diagnosis found about the current candidate.
        memory: a summary of the search so far (what was tried, what worked).
        snippets: optional reference code.
        n: how many proposals are wanted.
        kind: the registered engine asking, which selects the prompt templates and how a reply
            is read; empty for a proposer that needs neither (e.g. an LLM-free one).
        role: what is asked for: an improvement, or a repair of a failed ``candidate``.
        log: the failed candidate's compiler/runtime log, trimmed to its relevant lines.
        rules: the rules the judge enforces, one sentence each (policy, tolerance, forbidden tricks).
        target: what is known of the device and the times to beat (eager, compiled, floor).
        feedback: why the previous answer to this request could not be used (a re-prompt).
        best: the best candidate found so far, when it is not ``candidate`` itself.
        siblings: the other children of ``candidate`` already proposed, with their verdicts.
        directions: the distinct approaches the ``n`` requests of this step are asked for, one
            each (request ``i`` takes ``directions[i % len]``); empty: each request is still told
            its number and asked to differ from the others.
        plan: the analyst's pick for this step (its move and its rationale, in plain words), shown
            to the coder; empty when no analyst was asked.
        images: pictures for a model that accepts images (a proposer for one that does not
            leaves them out; the text should not depend on them alone).
    """

    task: str
    candidate: str = ""
    candidate_summary: str = ""
    evaluation: str = ""
    findings: tuple[FindingNote, ...] = ()
    memory: str = ""
    snippets: tuple[Snippet, ...] = ()
    n: int = 1
    kind: str = ""
    role: ProposalRole = ProposalRole.IMPROVE
    log: str = ""
    rules: tuple[str, ...] = ()
    target: str = ""
    feedback: str = ""
    best: Attempt | None = None
    siblings: tuple[Attempt, ...] = ()
    directions: tuple[str, ...] = ()
    plan: str = ""
    images: tuple[Image, ...] = ()

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        object.__setattr__(self, "role", ProposalRole(self.role))
        object.__setattr__(self, "siblings", tuple(self.siblings))
        object.__setattr__(self, "directions", tuple(self.directions))
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "findings", tuple(self.findings))
        object.__setattr__(self, "snippets", tuple(self.snippets))
        object.__setattr__(self, "images", tuple(self.images))

    def direction(self, index: int) -> str:
        """The approach request ``index`` of this step is asked for ("" when none was given)."""
        return self.directions[index % len(self.directions)] if self.directions else ""

    def other_directions(self, index: int) -> tuple[str, ...]:
        """The approaches the other requests of this step are asked for."""
        mine = self.direction(index)
        others = (self.direction(i) for i in range(self.n) if i != index)
        return tuple(dict.fromkeys(d for d in others if d and d != mine))


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Tokens and money spent by one model call.

    Attributes:
        model: the model name as configured.
        input_tokens: prompt tokens reported by the server.
        output_tokens: completion tokens reported by the server.
        cost_usd: dollars, from the configured price; None when the model has no price.
    """

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """One usable proposal.

    Attributes:
        content: the proposed code or content (for kernels, a complete Python file).
        note: the move that was made, in one line, as the proposer described it.
        origin: who proposed it, e.g. ``openai:gpt-5`` or ``exchange:/tmp/x/answer-0001.md``.
        usage: what it cost; None where nothing was metered.
    """

    content: str
    note: str = ""
    origin: str = ""
    usage: Usage | None = None

    ok = True


@dataclass(frozen=True, kw_only=True)
class ProposalFailure:
    """A proposal attempt that gave no usable content: a value to record, never an exception.

    Attributes:
        reason: the kind of failure.
        detail: one line a person can act on (an HTTP status, a parse error, an instruction).
        origin: who was asked.
        raw: the reply as received, for the record; empty when there was none.
        usage: what the attempt cost; None where nothing was metered.
    """

    reason: FailureReason
    detail: str = ""
    origin: str = ""
    raw: str = ""
    usage: Usage | None = None

    ok = False


@dataclass(frozen=True, kw_only=True)
class BudgetExhausted(ProposalFailure):
    """The token or dollar budget is spent; no call was made for this proposal.

    Attributes:
        spent_tokens: tokens spent so far against the budget.
        spent_usd: dollars spent so far against the budget.
    """

    reason: FailureReason = FailureReason.BUDGET_EXHAUSTED
    spent_tokens: int = 0
    spent_usd: float = 0.0


ProposalResult = Proposal | ProposalFailure
"""What a proposer returns for each wanted proposal: either a proposal or a typed failure."""


class Proposer(abc.ABC):
    """Turns a request into ``request.n`` results, one per wanted proposal.

    Implementations never raise for a bad reply, a network fault or a spent budget: each of
    those is a ``ProposalFailure`` in the returned list, so a search can record it and go on.
    """

    @abc.abstractmethod
    def propose(self, request: ProposalRequest) -> list[ProposalResult]:
        """Asks for ``request.n`` proposals.

        Args:
            request: what to improve and what is known about it.

        Returns:
            Exactly ``request.n`` results, each a ``Proposal`` or a ``ProposalFailure``.
        """
