"""Prices tokens and keeps a running total against a budget."""

from __future__ import annotations

import threading

from loopwise.core.propose._base import BudgetExhausted, Usage
from loopwise.core.propose.llm._config import BudgetConfig, ModelPrice


def cost_usd(
    prices: dict[str, ModelPrice], model: str, input_tokens: int, output_tokens: int
) -> float | None:
    """Dollars for one call at the configured price, or None when the model has no price."""
    price = prices.get(model)
    if price is None:
        return None
    return (input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok) / 1e6


class Budget:
    """What a proposer has spent, and whether it may call again.

    A call that starts within budget may finish past it: the budget stops the next call.
    """

    def __init__(self, limits: BudgetConfig | None = None) -> None:
        self.limits = limits or BudgetConfig()
        self.spent_tokens = 0
        self.spent_usd = 0.0
        self._lock = threading.Lock()

    def charge(self, usage: Usage) -> None:
        """Adds one call's tokens and dollars (an unknown cost adds no dollars)."""
        with self._lock:
            self.spent_tokens += usage.total_tokens
            self.spent_usd += usage.cost_usd or 0.0

    @property
    def exhausted(self) -> bool:
        """True once either limit is reached."""
        tokens, usd = self.limits.max_tokens, self.limits.max_usd
        return (tokens is not None and self.spent_tokens >= tokens) or (
            usd is not None and self.spent_usd >= usd
        )

    def exhausted_result(self, origin: str) -> BudgetExhausted:
        """The typed result returned instead of a call once the budget is spent."""
        limits = self.limits
        detail = (
            f"budget spent: {self.spent_tokens} tokens (limit {limits.max_tokens}), "
            f"${self.spent_usd:.4f} (limit {limits.max_usd})"
        )
        return BudgetExhausted(
            detail=detail, origin=origin, spent_tokens=self.spent_tokens, spent_usd=self.spent_usd
        )
