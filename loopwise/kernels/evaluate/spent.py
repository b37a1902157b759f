"""Where a phase's seconds go: draws, reference runs, sandbox round trips, comparisons.

Nested activities charge their time to the innermost one only, so the parts add up to the whole.
On a GPU each activity ends with a device synchronize, so queued work is charged where it was queued.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Iterator


def tag_activity(exc: BaseException, name: str) -> None:
    """Marks ``exc`` with the innermost activity it escaped from (kept when already marked), so a
    failure can say where it happened."""
    if getattr(exc, "loopwise_activity", None) is None:
        try:
            exc.loopwise_activity = name
        except AttributeError:  # an exception type with slots: it stays unmarked
            pass


def activity_of(exc: BaseException) -> str | None:
    return getattr(exc, "loopwise_activity", None)


class Spent:
    """Seconds by activity name."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.seconds: Counter = Counter()
        self._sync = sync or (lambda: None)
        self._stack: list[str] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        self._stack.append(name)
        try:
            yield
        except BaseException as exc:
            tag_activity(exc, name)
            raise
        finally:
            self._sync()
            self._stack.pop()
            elapsed = time.perf_counter() - t0
            self.seconds[name] += elapsed
            if self._stack:
                self.seconds[self._stack[-1]] -= elapsed

    def as_phases(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}.{name}": max(0.0, s) for name, s in sorted(self.seconds.items())}


def for_device(device: str) -> Spent:
    if device.startswith("cuda"):
        import torch

        return Spent(torch.cuda.synchronize)
    return Spent()
