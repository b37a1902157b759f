"""The two wire backends: OpenAI-compatible chat completions and Anthropic Messages.

Each turns one prompt (and, with tools, the tool rounds so far) into one ``ChatReply`` or raises
``CallError``; the SDKs' own retries are off (``max_retries=0``) so the retry policy in ``_retry``
is the only one.
"""

from __future__ import annotations

import abc
import base64
import email.utils
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loopwise.core.propose._prompt import Prompt
from loopwise.core.propose.llm._config import LLMConfig
from loopwise.core.propose.llm._tools import (
    ChatTool,
    ToolCall,
    ToolResult,
    anthropic_spec,
    openai_spec,
)
from loopwise.errors import UserError

_RETRY_STATUSES = frozenset({408, 409, 425, 429})
_PLACEHOLDER_KEY = "EMPTY"  # vLLM, SGLang and Ollama accept any key


@dataclass(frozen=True)
class ChatReply:
    """One model reply: its text, the tokens it used, whether it stopped at its limit, and the
    tools it asked to call (``message`` is the reply in its wire format, to send back)."""

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str
    truncated: bool
    tool_calls: tuple[ToolCall, ...] = ()
    message: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ToolRound:
    """A reply that asked for tools, and what the tools answered."""

    reply: ChatReply
    results: tuple[ToolResult, ...]


@dataclass(frozen=True)
class Dialogue:
    """What a request carries besides the prompt when tools are offered.

    Attributes:
        tools: the tools declared to the model.
        rounds: the tool rounds so far, replayed in order.
        closing: when set, the model may call no more tools and this text asks for its answer
            (the tools stay declared: the rounds refer to them).
    """

    tools: tuple[ChatTool, ...]
    rounds: tuple[ToolRound, ...] = ()
    closing: str = ""


class CallError(Exception):
    """A call that gave no reply; ``retryable`` says whether trying again may help."""

    def __init__(self, detail: str, *, retryable: bool, timeout: bool = False,
                 retry_after_s: float | None = None, status: int | None = None,
                 unreachable: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retryable = retryable
        self.timeout = timeout
        self.unreachable = unreachable  # no connection to the server was made
        self.retry_after_s = retry_after_s
        self.status = status  # the HTTP status, when the server answered with an error


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    try:
        if millis is not None:
            return max(float(millis) / 1000.0, 0.0)
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def translate_error(exc: Exception, sdk: Any) -> CallError:
    """Maps an ``openai`` or ``anthropic`` exception (same hierarchy) to a ``CallError``."""
    if isinstance(exc, sdk.APITimeoutError):
        return CallError(f"timed out: {exc}", retryable=True, timeout=True)
    if isinstance(exc, sdk.APIConnectionError):
        return CallError(f"connection failed: {_root_cause(exc)}", retryable=True, unreachable=True)
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        retry = status in _RETRY_STATUSES or status >= 500
        after = parse_retry_after(getattr(exc.response, "headers", None))
        return CallError(f"HTTP {status}: {exc.message}", retryable=retry, retry_after_s=after, status=status)
    return CallError(f"{type(exc).__name__}: {exc}", retryable=False)


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception behind ``exc`` (the SDK's "Connection error." hides the refusal)."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _api_key(config: LLMConfig) -> str:
    key = os.environ.get(config.key_env)
    if key:
        return key
    if config.base_url:
        return _PLACEHOLDER_KEY
    raise UserError(f"set {config.key_env} to the API key for {config.api} (or configure base_url)")


class ChatClient(abc.ABC):
    """Sends one prompt to one model."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config

    @abc.abstractmethod
    def complete(self, prompt: Prompt, dialogue: Dialogue | None = None) -> ChatReply:
        """Returns the reply to the prompt (and the dialogue's tool rounds), or raises ``CallError``."""


class OpenAIChatClient(ChatClient):
    """``POST {base_url}/chat/completions`` through the ``openai`` SDK."""

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(config)
        import openai

        self._sdk = openai
        self._client = openai.OpenAI(
            api_key=_api_key(config), base_url=config.base_url,
            timeout=config.timeout_s, max_retries=0,
        )

    def complete(self, prompt: Prompt, dialogue: Dialogue | None = None) -> ChatReply:
        cfg = self.config
        kwargs: dict[str, Any] = {cfg.max_tokens_field: cfg.max_output_tokens}
        if cfg.temperature is not None:
            kwargs["temperature"] = cfg.temperature
        if cfg.extra_body:
            kwargs["extra_body"] = cfg.extra_body
        messages: list[dict[str, Any]] = [{"role": "system", "content": prompt.system},
                                          {"role": "user", "content": _openai_user(prompt)}]
        if dialogue is not None:
            kwargs["tools"] = [openai_spec(tool) for tool in dialogue.tools]
            messages += _openai_rounds(dialogue)
            if dialogue.closing:
                kwargs["tool_choice"] = "none"
        try:
            resp = self._client.chat.completions.create(
                model=cfg.model, messages=messages, **kwargs
            )
        except self._sdk.OpenAIError as exc:
            raise translate_error(exc, self._sdk) from exc
        if not resp.choices:
            raise CallError("the server returned no choices", retryable=True)
        choice, usage = resp.choices[0], resp.usage
        finish = choice.finish_reason or ""
        text = choice.message.content or ""
        calls = tuple(_openai_call(tc) for tc in choice.message.tool_calls or ())
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        return ChatReply(
            text=text,
            input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
            finish_reason=finish, truncated=finish == "length", tool_calls=calls, message=message,
        )


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _openai_user(prompt: Prompt) -> str | list[dict[str, Any]]:
    """The user message's content: its text, then each image as an ``image_url`` data URL."""
    if not prompt.images:
        return prompt.user
    return [{"type": "text", "text": prompt.user}] + [
        {"type": "image_url", "image_url": {"url": f"data:{image.media_type};base64,{_base64(image.data)}"}}
        for image in prompt.images]


def _anthropic_user(prompt: Prompt) -> str | list[dict[str, Any]]:
    """The user message's content: its text, then each image as a base64 ``image`` block."""
    if not prompt.images:
        return prompt.user
    return [{"type": "text", "text": prompt.user}] + [
        {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": _base64(image.data)}}
        for image in prompt.images]


def _openai_call(call: Any) -> ToolCall:
    """A function tool call (or a custom one, whose input is passed as is)."""
    function = getattr(call, "function", None)
    if function is not None:
        return ToolCall(call.id, function.name or "", function.arguments or "")
    custom = getattr(call, "custom", None)
    return ToolCall(call.id, getattr(custom, "name", "") or "", getattr(custom, "input", "") or "")


def _openai_rounds(dialogue: Dialogue) -> list[dict[str, Any]]:
    """Each round as the assistant message, one ``tool`` message per result, then the closing."""
    messages: list[dict[str, Any]] = []
    for round_ in dialogue.rounds:
        messages.append(dict(round_.reply.message))
        messages += [{"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in round_.results]
    if dialogue.closing:
        messages.append({"role": "user", "content": dialogue.closing})
    return messages


class AnthropicChatClient(ChatClient):
    """``POST {base_url}/v1/messages`` through the ``anthropic`` SDK."""

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(config)
        import anthropic

        self._sdk = anthropic
        self._client = anthropic.Anthropic(
            api_key=_api_key(config), base_url=config.base_url,
            timeout=config.timeout_s, max_retries=0,
        )

    def complete(self, prompt: Prompt, dialogue: Dialogue | None = None) -> ChatReply:
        cfg = self.config
        extra = dict(cfg.extra_body)
        if cfg.temperature is not None:
            # anthropic 2.x dropped sampling keywords from create(); the API field stays
            extra["temperature"] = cfg.temperature
        kwargs: dict[str, Any] = {"extra_body": extra} if extra else {}
        messages: list[dict[str, Any]] = [{"role": "user", "content": _anthropic_user(prompt)}]
        if dialogue is not None:
            kwargs["tools"] = [anthropic_spec(tool) for tool in dialogue.tools]
            messages += _anthropic_rounds(dialogue)
            if dialogue.closing:
                kwargs["tool_choice"] = {"type": "none"}
        try:
            resp = self._client.messages.create(
                model=cfg.model, max_tokens=cfg.max_output_tokens, system=prompt.system,
                messages=messages, **kwargs,
            )
        except self._sdk.AnthropicError as exc:
            raise translate_error(exc, self._sdk) from exc
        text = "".join(getattr(b, "text", "") for b in resp.content if b.type == "text")
        calls = tuple(ToolCall(b.id, b.name, json.dumps(b.input)) for b in resp.content if b.type == "tool_use")
        # the reply goes back verbatim (thinking blocks must keep their signatures), less empty
        # text blocks, which the API refuses in a request
        message = {"role": "assistant",
                   "content": [b.model_dump(mode="json", exclude_none=True) for b in resp.content
                               if not (b.type == "text" and not getattr(b, "text", ""))]}
        stop = resp.stop_reason or ""
        return ChatReply(
            text=text,
            input_tokens=resp.usage.input_tokens or 0,
            output_tokens=resp.usage.output_tokens or 0,
            finish_reason=stop, truncated=stop == "max_tokens", tool_calls=calls, message=message,
        )


def _anthropic_rounds(dialogue: Dialogue) -> list[dict[str, Any]]:
    """Each round as the assistant message and one user message of ``tool_result`` blocks; the
    closing text joins the last of those (the API wants user and assistant turns to alternate)."""
    messages: list[dict[str, Any]] = []
    for round_ in dialogue.rounds:
        messages.append(dict(round_.reply.message))
        blocks: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": r.call_id, "content": r.content,
                                         **({"is_error": True} if r.is_error else {})} for r in round_.results]
        messages.append({"role": "user", "content": blocks})
    if dialogue.closing and messages:
        messages[-1]["content"].append({"type": "text", "text": dialogue.closing})
    return messages


def make_client(config: LLMConfig) -> ChatClient:
    """The backend named by ``config.api``."""
    if config.api == "anthropic":
        return AnthropicChatClient(config)
    return OpenAIChatClient(config)
