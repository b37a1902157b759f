"""Proposers: one interface for every engine, from an LLM, a person or a coding agent.

``Proposer.propose(ProposalRequest) -> list[Proposal | ProposalFailure]``. A bad reply, a
network fault, a timeout or a spent budget is a ``ProposalFailure`` value, never an exception.
``LLMProposer`` (in ``loopwise.core.propose.llm``) talks to OpenAI-compatible servers and to
Anthropic; ``ExchangeProposer`` writes prompts to a folder and waits for answer files.
"""

from loopwise.core.propose._base import (
    EXCHANGE_TIMEOUT_S,
    Attempt,
    REPROMPT_ROUNDS,
    REPROMPTABLE,
    BudgetExhausted,
    FailureReason,
    FindingNote,
    Proposal,
    ProposalFailure,
    Image,
    ProposalRequest,
    ProposalResult,
    ProposalRole,
    Proposer,
    Snippet,
    Usage,
)
from loopwise.core.propose._extract import (
    ExtractFailure,
    Extracted,
    extract_for,
    extract_json,
    extract_python,
    reply_block,
)
from loopwise.core.propose._log import log_excerpt
from loopwise.core.propose._prompt import Prompt, prompt_version, render_prompt
from loopwise.core.propose.exchange import ExchangeProposer
from loopwise.core.propose.factory import make_proposer

__all__ = [
    "REPROMPTABLE",
    "REPROMPT_ROUNDS",
    "Attempt",
    "BudgetExhausted",
    "ExchangeProposer",
    "ExtractFailure",
    "Extracted",
    "FailureReason",
    "FindingNote",
    "Prompt",
    "Proposal",
    "ProposalFailure",
    "Image",
    "ProposalRequest",
    "ProposalResult",
    "ProposalRole",
    "Proposer",
    "Snippet",
    "Usage",
    "extract_for",
    "extract_json",
    "extract_python",
    "log_excerpt",
    "make_proposer",
    "prompt_version",
    "render_prompt",
    "reply_block",
]
