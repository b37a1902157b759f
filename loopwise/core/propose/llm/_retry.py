"""Our retry policy: exponential backoff with jitter, a server's ``Retry-After`` honoured."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from loopwise.core.propose.llm._clients import CallError, ChatReply


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait before trying a failed call again.

    Attributes:
        max_retries: retries after the first attempt.
        initial_s: the first computed wait; each later one doubles.
        max_s: the longest wait, computed or asked for by the server.
        jitter: the random share added to a computed wait.
    """

    max_retries: int = 4
    initial_s: float = 2.0
    max_s: float = 120.0
    jitter: float = 0.25

    def delay(self, retry: int, error: CallError, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first retry)."""
        if error.retry_after_s is not None:
            return min(error.retry_after_s, self.max_s)
        base = min(self.initial_s * (2**retry), self.max_s)
        return base * (1.0 + self.jitter * rng.random())


@dataclass(frozen=True)
class Outcome:
    """The reply, or the last error; and how many attempts it took and how long was waited."""

    reply: ChatReply | None
    error: CallError | None
    attempts: int
    waits: tuple[float, ...]


def call_with_retries(
    call: Callable[[], ChatReply],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None],
    rng: random.Random,
) -> Outcome:
    """Calls until a reply, an error not worth retrying, or the retries run out."""
    waits: list[float] = []
    for attempt in range(policy.max_retries + 1):
        try:
            return Outcome(call(), None, attempt + 1, tuple(waits))
        except CallError as error:
            if not error.retryable or attempt == policy.max_retries:
                return Outcome(None, error, attempt + 1, tuple(waits))
            wait = policy.delay(attempt, error, rng)
            waits.append(wait)
            sleep(wait)
    raise AssertionError("unreachable: the loop returns on its last attempt")
