"""Typed settings of the LLM proposer (pure pydantic: importing this is cheap)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


class ModelPrice(BaseModel):
    """Dollars per million tokens of one model."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class BudgetConfig(BaseModel):
    """Limits on what one proposer may spend; None means no limit.

    Attributes:
        max_tokens: input plus output tokens over all calls.
        max_usd: dollars over all calls; calls to a model without a price count zero.
    """

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(None, ge=0)
    max_usd: float | None = Field(None, ge=0)


class LLMConfig(BaseModel):
    """How to reach a model and how hard to try.

    Attributes:
        api: ``openai`` for any OpenAI-compatible chat-completions server (OpenAI, vLLM, SGLang,
            Ollama) or ``anthropic`` for the Anthropic Messages API.
        model: the model name sent to the server.
        base_url: the server's URL (e.g. ``http://localhost:8000/v1``); None for the SDK default.
        api_key_env: the NAME of the environment variable holding the key; None picks
            ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY``. With a ``base_url`` and no key set, a
            placeholder is sent (local servers accept any key).
        temperature: sampling temperature; None leaves the server's default.
        max_output_tokens: the most tokens one reply may have.
        timeout_s: seconds to wait for one reply.
        max_retries: retries after a 429, a 5xx, a timeout or a lost connection.
        backoff_initial_s: the first retry's wait; it doubles on each retry.
        backoff_max_s: the longest wait, also the cap on a server's ``Retry-After``.
        backoff_jitter: the random share added to a computed wait (0.25 adds up to 25%).
        prices: dollars per million tokens by model name; a model without one costs None.
        budget: spending limits after which the proposer stops calling.
        extra_body: extra JSON fields sent with every request (e.g. vLLM sampling params).
        max_tokens_field: how an OpenAI-compatible server is told ``max_output_tokens``;
            ``max_tokens`` for older servers that do not know ``max_completion_tokens``.
        tools: offer the engine's tools to the model when it has any that are available (for
            kernels: ``cutlass_search`` and ``cutlass_read`` over the CUTLASS / CuTe sources).
        max_tool_rounds: replies that may call tools in one proposal; after that the model is
            asked for its answer with tools off. 0 offers no tools.
        images: the model accepts image inputs: a request's images (an engine's plots) are sent
            as image blocks; without it they are left out and the engine writes text instead.
    """

    model_config = ConfigDict(extra="forbid")

    api: Literal["openai", "anthropic"] = "openai"
    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = Field(None, ge=0)
    max_output_tokens: int = Field(16384, ge=1)
    timeout_s: float = Field(600.0, gt=0)
    max_retries: int = Field(4, ge=0, le=20)
    backoff_initial_s: float = Field(2.0, ge=0)
    backoff_max_s: float = Field(120.0, ge=0)
    backoff_jitter: float = Field(0.25, ge=0, le=1)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    tools: bool = True
    max_tool_rounds: int = Field(4, ge=0, le=32)
    images: bool = False

    @property
    def key_env(self) -> str:
        """The environment variable the API key is read from."""
        return self.api_key_env or _DEFAULT_KEY_ENV[self.api]
