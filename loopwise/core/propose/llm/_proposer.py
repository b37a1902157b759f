"""The LLM proposer: render the prompt, call the model with our retries (and run the tools it
calls, a few rounds at most), extract the code."""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopwise.core.propose._base import (
    FailureReason,
    Proposal,
    ProposalFailure,
    ProposalRequest,
    ProposalResult,
    ProposalRole,
    Proposer,
    Usage,
)
from loopwise.core.propose._extract import ExtractFailure, extract_for
from loopwise.core.propose._prompt import Prompt, render_prompt, render_template
from loopwise.core.propose.llm._budget import Budget, cost_usd
from loopwise.core.propose.llm._clients import (
    ChatClient,
    ChatReply,
    Dialogue,
    ToolRound,
    make_client,
)
from loopwise.core.propose.llm._config import LLMConfig
from loopwise.core.propose.llm._retry import Outcome, RetryPolicy, call_with_retries
from loopwise.core.propose.llm._tools import (
    ChatTool,
    Toolbox,
    ToolCall,
    ToolContext,
    ToolResult,
    engine_tools,
    run_tool_call,
)

TOOL_USE = "tool_use"
"""The ``CallRecord.outcome`` of a reply that called tools (the proposal goes on)."""


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
        outcome: ``ok``, ``tool_use`` (the reply called tools) or a ``FailureReason`` value.
        detail: why it failed; empty when it did not.
        round: which call of the proposal this was (0 for the first; one more per tool round).
        tool_calls: the tools the reply called.
        tool_results: what they answered.
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
    round: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()


log = logging.getLogger(__name__)

CallLog = Callable[[CallRecord], None]
"""A hook called once per model call (not for calls a spent budget skipped)."""


class LLMProposer(Proposer):
    """Asks a chat model for proposals, one conversation per wanted proposal.

    With tools on (``config.tools``) and tools for the request's kind, the model may call them:
    each reply with tool calls is answered with the tools' results and the model is asked again,
    up to ``config.max_tool_rounds`` times; then it must answer without tools. Every call is
    charged to the budget and logged; once the budget is spent mid-proposal the model is asked
    for its answer at once.

    Args:
        config: the model, the server and the retry, price and budget settings.
        call_log: called with a ``CallRecord`` after each call.
        budget: the running total to charge; defaults to a fresh one from ``config.budget``
            (pass one ``Budget`` to several proposers to share a limit).
        client: a ready backend; defaults to the one ``config.api`` names.
        sleep: how retries wait (tests pass a recorder).
        rng: the source of backoff jitter.
        toolbox: the tools to offer per request; defaults to the engines' own (``engine_tools``),
            made for the run each request comes from (a ``ToolContext``).
        device: the device the run judges on, for the tools (empty: unknown).
        tool_folder: where the tools may write files for the run (None: nowhere of the run's).

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
        toolbox: Toolbox = engine_tools,
        device: str = "",
        tool_folder: Path | None = None,
    ) -> None:
        self.config = config
        self.budget = budget or Budget(config.budget)
        self.origin = f"{config.api}:{config.model}"
        self._client = client or make_client(config)
        self._call_log = call_log
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._toolbox = toolbox
        self._device = device
        self._tool_folder = tool_folder
        self._tools: dict[ToolContext, tuple[ChatTool, ...]] = {}
        self._tools_refused = False
        self._tool_note = ""
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
        """Asks for ``request.n`` proposals, one conversation each; past the budget, ``BudgetExhausted``."""
        tools = self.tools_for(self.tool_context(request))
        if tools:
            self._tool_note = render_template("tools_system.md.j2", tools=tools, max_rounds=self.config.max_tool_rounds)
        results: list[ProposalResult] = []
        for index in range(request.n):  # each proposal is asked for its own approach
            prompt = render_prompt(request, index)
            if prompt.images and not self.config.images:  # a text-only model is never sent a picture
                prompt = dataclasses.replace(prompt, images=())
            if tools and self._tools_refused:  # refused during an earlier proposal of this request
                tools = ()
            if tools:
                prompt = dataclasses.replace(prompt, system=prompt.system.rstrip() + "\n" + self._tool_note)
            if self.budget.exhausted:
                results.append(self.budget.exhausted_result(self.origin))
            else:
                results.append(self._propose_one(prompt, request.kind, tools, request.role))
        return results

    def tool_context(self, request: ProposalRequest) -> ToolContext:
        """What the tools are told about the run ``request`` comes from: its engine, problem and
        rules, and this proposer's device and folder."""
        return ToolContext(kind=request.kind, task=request.task, rules=request.rules, device=self._device,
                           folder=self._tool_folder)

    def tools_for(self, context: ToolContext) -> tuple[ChatTool, ...]:
        """The tools offered for proposals in ``context`` (made once per context): none when tools
        are off or there are none, or when the server refused them once."""
        if not self.config.tools or self.config.max_tool_rounds == 0 or self._tools_refused:
            return ()
        if context not in self._tools:
            self._tools[context] = tuple(self._toolbox(context))
        return self._tools[context]

    def _propose_one(self, prompt: Prompt, kind: str, tools: tuple[ChatTool, ...] = (),
                     role: ProposalRole = ProposalRole.IMPROVE) -> ProposalResult:
        by_name = {tool.name: tool for tool in tools}
        rounds: list[ToolRound] = []
        spent: Usage | None = None
        closing = ""
        while True:
            dialogue = Dialogue(tools, tuple(rounds), closing) if tools else None
            start = time.monotonic()
            outcome = call_with_retries(functools.partial(self._client.complete, prompt, dialogue),
                                        self._policy, sleep=self._sleep, rng=self._rng)
            reply = outcome.reply
            if reply is None and tools and not rounds and _refuses_tools(outcome):
                # a server without tool calling (e.g. vLLM started without a tool parser) answers
                # 400: ask again without tools, and offer none to this server from now on
                failure = dataclasses.replace(self._call_failure(outcome), usage=spent)
                self._log(prompt, outcome, None, None, failure, start, len(rounds))
                log.warning("%s refused the tools (%s); asking without them from now on",
                            self.origin, outcome.error.detail)
                self._tools.clear()
                self._tools_refused = True
                tools, by_name = (), {}
                prompt = self._without_tool_note(prompt)
                continue
            if reply is None:
                failure = dataclasses.replace(self._call_failure(outcome), usage=spent)
                self._log(prompt, outcome, None, None, failure, start, len(rounds))
                return failure
            usage = self._usage(reply)
            self.budget.charge(usage)
            spent = _add(spent, usage)
            if reply.tool_calls and not closing and not reply.truncated:
                results = tuple(run_tool_call(by_name, call) for call in reply.tool_calls)
                self._log(prompt, outcome, reply, usage, None, start, len(rounds), results)
                rounds.append(ToolRound(reply, results))
                if len(rounds) >= self.config.max_tool_rounds or self.budget.exhausted:
                    closing = render_template("tools_closing.md.j2").strip()
                continue
            result = self._from_reply(reply, spent, kind, role)
            self._log(prompt, outcome, reply, usage, result, start, len(rounds))
            return result

    def _log(self, prompt: Prompt, outcome: Outcome, reply: ChatReply | None, usage: Usage | None,
             result: ProposalResult | None, start: float, round_: int,
             tool_results: tuple[ToolResult, ...] = ()) -> None:
        """One ``CallRecord`` per model call; ``result`` is None for a reply that called tools."""
        if self._call_log is None:
            return
        if result is None:
            status, detail = TOOL_USE, ""
        else:
            status, detail = ("ok", "") if result.ok else (str(result.reason), result.detail)
        self._call_log(CallRecord(
            origin=self.origin, prompt=prompt, reply=reply.text if reply else "",
            finish_reason=reply.finish_reason if reply else "", usage=usage,
            attempts=outcome.attempts, waits=outcome.waits, latency_s=time.monotonic() - start,
            outcome=status, detail=detail, round=round_,
            tool_calls=reply.tool_calls if reply and result is None else (), tool_results=tool_results,
        ))

    def _without_tool_note(self, prompt: Prompt) -> Prompt:
        system = prompt.system.replace("\n" + self._tool_note, "") if self._tool_note else prompt.system
        return dataclasses.replace(prompt, system=system)

    def _call_failure(self, outcome: Outcome) -> ProposalFailure:
        error = outcome.error
        assert error is not None
        reason = FailureReason.TIMEOUT if error.timeout else FailureReason.API_ERROR
        model = self.config.model + (f" at {self.config.base_url}" if self.config.base_url else f" ({self.config.api})")
        if error.unreachable:
            what = f"could not be reached: {error.detail.removeprefix('connection failed: ')}"
        elif error.timeout:
            what = f"timed out (no answer within {self.config.timeout_s:g} s)"
        elif error.status is not None:
            what = f"answered {error.detail}"
        else:
            what = f"failed: {error.detail}"
        attempts = f"{outcome.attempts} attempt{'s' if outcome.attempts > 1 else ''}"
        return ProposalFailure(reason=reason, detail=f"{model} {what} ({attempts})", origin=self.origin)

    def _usage(self, reply: ChatReply) -> Usage:
        model = self.config.model
        cost = cost_usd(self.config.prices, model, reply.input_tokens, reply.output_tokens)
        return Usage(model=model, input_tokens=reply.input_tokens,
                     output_tokens=reply.output_tokens, cost_usd=cost)

    def _from_reply(self, reply: ChatReply, usage: Usage, kind: str, role: ProposalRole) -> ProposalResult:
        found = extract_for(kind, reply.text, truncated=reply.truncated, role=role)
        if isinstance(found, ExtractFailure):
            return ProposalFailure(reason=found.reason, detail=found.detail,
                                   origin=self.origin, raw=reply.text, usage=usage)
        return Proposal(content=found.code, note=found.note, origin=self.origin, usage=usage)


def _add(total: Usage | None, usage: Usage) -> Usage:
    """The sum of two calls' usage (an unknown cost stays unknown)."""
    if total is None:
        return usage
    cost = None if total.cost_usd is None or usage.cost_usd is None else total.cost_usd + usage.cost_usd
    return Usage(model=usage.model, input_tokens=total.input_tokens + usage.input_tokens,
                 output_tokens=total.output_tokens + usage.output_tokens, cost_usd=cost)


def _refuses_tools(outcome: Outcome) -> bool:
    """Whether a failed first call looks like a server that does not do tool calling: a client
    error (400, 404 or 422) that no retry would change."""
    error = outcome.error
    return error is not None and not error.retryable and getattr(error, "status", None) in (400, 404, 422)

