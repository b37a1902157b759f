"""The two wire backends: OpenAI-compatible chat completions and Anthropic Messages.

Each turns one prompt into one ``ChatReply`` or raises ``CallError``; the SDKs' own retries
are off (``max_retries=0``) so the retry policy in ``_retry`` is the only one.
"""

from __future__ import annotations

import abc
import email.utils
import os
import time
from dataclasses import dataclass
from typing import Any

from loopwise.core.propose._prompt import Prompt
from loopwise.core.propose.llm._config import LLMConfig
from loopwise.errors import UserError

_RETRY_STATUSES = frozenset({408, 409, 425, 429})
_PLACEHOLDER_KEY = "EMPTY"  # vLLM, SGLang and Ollama accept any key


@dataclass(frozen=True)
class ChatReply:
    """One model reply: its text, the tokens it used, and whether it stopped at its limit."""

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str
    truncated: bool


class CallError(Exception):
    """A call that gave no reply; ``retryable`` says whether trying again may help."""

    def __init__(self, detail: str, *, retryable: bool, timeout: bool = False,
                 retry_after_s: float | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retryable = retryable
        self.timeout = timeout
        self.retry_after_s = retry_after_s


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
        return CallError(f"connection failed: {exc}", retryable=True)
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        retry = status in _RETRY_STATUSES or status >= 500
        after = parse_retry_after(getattr(exc.response, "headers", None))
        return CallError(f"HTTP {status}: {exc.message}", retryable=retry, retry_after_s=after)
    return CallError(f"{type(exc).__name__}: {exc}", retryable=False)


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
    def complete(self, prompt: Prompt) -> ChatReply:
        """Returns the reply, or raises ``CallError``."""


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

    def complete(self, prompt: Prompt) -> ChatReply:
        cfg = self.config
        kwargs: dict[str, Any] = {cfg.max_tokens_field: cfg.max_output_tokens}
        if cfg.temperature is not None:
            kwargs["temperature"] = cfg.temperature
        if cfg.extra_body:
            kwargs["extra_body"] = cfg.extra_body
        messages = [{"role": "system", "content": prompt.system},
                    {"role": "user", "content": prompt.user}]
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
        return ChatReply(
            text=choice.message.content or "",
            input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
            finish_reason=finish, truncated=finish == "length",
        )


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

    def complete(self, prompt: Prompt) -> ChatReply:
        cfg = self.config
        extra = dict(cfg.extra_body)
        if cfg.temperature is not None:
            # anthropic 2.x dropped sampling keywords from create(); the API field stays
            extra["temperature"] = cfg.temperature
        kwargs: dict[str, Any] = {"extra_body": extra} if extra else {}
        try:
            resp = self._client.messages.create(
                model=cfg.model, max_tokens=cfg.max_output_tokens, system=prompt.system,
                messages=[{"role": "user", "content": prompt.user}], **kwargs,
            )
        except self._sdk.AnthropicError as exc:
            raise translate_error(exc, self._sdk) from exc
        text = "".join(getattr(b, "text", "") for b in resp.content if b.type == "text")
        stop = resp.stop_reason or ""
        return ChatReply(
            text=text,
            input_tokens=resp.usage.input_tokens or 0,
            output_tokens=resp.usage.output_tokens or 0,
            finish_reason=stop, truncated=stop == "max_tokens",
        )


def make_client(config: LLMConfig) -> ChatClient:
    """The backend named by ``config.api``."""
    if config.api == "anthropic":
        return AnthropicChatClient(config)
    return OpenAIChatClient(config)
