"""The LLM proposer: any OpenAI-compatible server (OpenAI, vLLM, SGLang, Ollama) or Anthropic.

Prompts come from the requesting engine's jinja2 templates; replies become ``Proposal`` records or typed
``ProposalFailure`` values; retries, token costs and budgets are ours, not the SDKs'. A model
may call the engine's tools (``ChatTool``) for a few rounds before it answers.
"""

from loopwise.core.propose.llm._budget import Budget, cost_usd
from loopwise.core.propose.llm._config import BudgetConfig, LLMConfig, ModelPrice
from loopwise.core.propose.llm._proposer import CallLog, CallRecord, LLMProposer
from loopwise.core.propose.llm._record import record_llm_call
from loopwise.core.propose.llm._tools import (
    ChatTool,
    Toolbox,
    ToolCall,
    ToolContext,
    ToolError,
    ToolResult,
    engine_tools,
    run_tool_call,
)

__all__ = [
    "Budget",
    "BudgetConfig",
    "CallLog",
    "CallRecord",
    "ChatTool",
    "LLMConfig",
    "LLMProposer",
    "ModelPrice",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "Toolbox",
    "cost_usd",
    "engine_tools",
    "record_llm_call",
    "run_tool_call",
]
