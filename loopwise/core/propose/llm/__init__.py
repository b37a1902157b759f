"""The LLM proposer: any OpenAI-compatible server (OpenAI, vLLM, SGLang, Ollama) or Anthropic.

Prompts come from the package's jinja2 templates; replies become ``Proposal`` records or typed
``ProposalFailure`` values; retries, token costs and budgets are ours, not the SDKs'.
"""

from loopwise.core.propose.llm._budget import Budget, cost_usd
from loopwise.core.propose.llm._config import BudgetConfig, LLMConfig, ModelPrice
from loopwise.core.propose.llm._proposer import CallLog, CallRecord, LLMProposer

__all__ = [
    "Budget",
    "BudgetConfig",
    "CallLog",
    "CallRecord",
    "LLMConfig",
    "LLMProposer",
    "ModelPrice",
    "cost_usd",
]
