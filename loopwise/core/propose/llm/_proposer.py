"""The LLM proposer: render the prompt, call the model with our retries, extract the code."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loopwise.core.propose._base import (
    FailureReason,
    Proposal,
    ProposalFailure,
    ProposalRequest,
    ProposalResult,
    Proposer,
    Usage,
)
from loopwise.core.propose._extract import ExtractFailure, extract_for
from loopwise.core.propose._prompt import Prompt, render_prompt
from loopwise.core.propose.llm._budget import Budget, cost_usd
from loopwise.core.propose.llm._clients import ChatClient, ChatReply, make_client
from loopwise.core.propose.llm._config import LLMConfig
from loopwise.core.propose.llm._retry import Outcome, RetryPolicy, call_with_retries


@dataclass(frozen=True, kw_only=True)
class CallRecord:
    """One model call as it happened, for the run store.

    Attributes:
        origin: ``<api>:<model>``.
        prompt: the system and user messages sent.
        reply: the reply text; empty when no reply came.
        finish_reason: the server's ``finish_reason`` / ``stop_reason``.
        usage: tokens and dollars; None when no reply came.
        attempts: HTTP attempts made, retries included.
        waits: seconds waited before each retry.
        latency_s: wall time of the whole call, waits included.
        outcome: ``ok`` or a ``FailureReason`` value.
        detail: why it failed; empty when it did not.
    """

    origin: str
    prompt: Prompt
    reply: str
    finish_reason: str
    usage: Usage | None
    attempts: int
    waits: tuple[float, ...]
    latency_s: float
    outcome: str
    detail: str = ""


CallLog = Callable[[CallRecord], None]
"""A hook called once per model call (not for calls a spent budget skipped)."""


class LLMProposer(Proposer):
    """Asks a chat model for proposals, one call per wanted proposal.

    Args:
        config: the model, the server and the retry, price and budget settings.
        call_log: called with a ``CallRecord`` after each call.
        budget: the running total to charge; defaults to a fresh one from ``config.budget``
            (pass one ``Budget`` to several proposers to share a limit).
        client: a ready backend; defaults to the one ``config.api`` names.
        sleep: how retries wait (tests pass a recorder).
        rng: the source of backoff jitter.

    Raises:
        UserError: no API key is set for a hosted API.
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        call_log: CallLog | None = None,
        budget: Budget | None = None,
        client: ChatClient | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.budget = budget or Budget(config.budget)
        self.origin = f"{config.api}:{config.model}"
        self._client = client or make_client(config)
        self._call_log = call_log
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._policy = RetryPolicy(
            config.max_retries,
            config.backoff_initial_s,
            config.backoff_max_s,
            config.backoff_jitter,
        )

    @classmethod
    def from_config(cls, data: LLMConfig | Mapping[str, Any], **kwargs: Any) -> LLMProposer:
        """Builds a proposer from an ``LLMConfig`` or a plain mapping (e.g. a YAML section).

        Args:
            data: the settings; a mapping is validated into an ``LLMConfig``.
            **kwargs: passed on to the constructor (``call_log``, ``budget``, ...).

        Raises:
            pydantic.ValidationError: (a ``ValueError``) a field is missing, unknown or wrong.
            UserError: no API key is set for a hosted API.
        """
        config = data if isinstance(data, LLMConfig) else LLMConfig.model_validate(dict(data))
        return cls(config, **kwargs)

    def propose(self, request: ProposalRequest) -> list[ProposalResult]:
        """Asks for ``request.n`` proposals, one call each; past the budget, ``BudgetExhausted``."""
        prompt = render_prompt(request)
        results: list[ProposalResult] = []
        for _ in range(request.n):
            if self.budget.exhausted:
                results.append(self.budget.exhausted_result(self.origin))
            else:
                results.append(self._propose_one(prompt, request.kind))
        return results

    def _propose_one(self, prompt: Prompt, kind: str = "kernels") -> ProposalResult:
        start = time.monotonic()
        outcome = call_with_retries(
            lambda: self._client.complete(prompt), self._policy, sleep=self._sleep, rng=self._rng
        )
        reply, usage = outcome.reply, None
        if reply is None:
            result = self._call_failure(outcome)
        else:
            usage = self._usage(reply)
            self.budget.charge(usage)
            result = self._from_reply(reply, usage, kind)
        if self._call_log is not None:
            self._call_log(CallRecord(
                origin=self.origin, prompt=prompt, reply=reply.text if reply else "",
                finish_reason=reply.finish_reason if reply else "", usage=usage,
                attempts=outcome.attempts, waits=outcome.waits,
                latency_s=time.monotonic() - start,
                outcome="ok" if result.ok else str(result.reason),
                detail="" if result.ok else result.detail,
            ))
        return result

    def _call_failure(self, outcome: Outcome) -> ProposalFailure:
        error = outcome.error
        assert error is not None
        reason = FailureReason.TIMEOUT if error.timeout else FailureReason.API_ERROR
        detail = f"{error.detail} (after {outcome.attempts} attempt(s))"
        return ProposalFailure(reason=reason, detail=detail, origin=self.origin)

    def _usage(self, reply: ChatReply) -> Usage:
        model = self.config.model
        cost = cost_usd(self.config.prices, model, reply.input_tokens, reply.output_tokens)
        return Usage(model=model, input_tokens=reply.input_tokens,
                     output_tokens=reply.output_tokens, cost_usd=cost)

    def _from_reply(self, reply: ChatReply, usage: Usage, kind: str = "kernels") -> ProposalResult:
        found = extract_for(kind, reply.text, truncated=reply.truncated)
        if isinstance(found, ExtractFailure):
            return ProposalFailure(reason=found.reason, detail=found.detail,
                                   origin=self.origin, raw=reply.text, usage=usage)
        return Proposal(content=found.code, note=found.note, origin=self.origin, usage=usage)
