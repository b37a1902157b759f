"""The Executor role: run jobs somewhere (local workers now, Ray later) and hand back results.

A job names its handler by import path (``"loopwise.kernels.jobs:evaluate"``), so the executor
knows nothing about engines; handlers return JSON-safe dicts. The search that submits jobs never
runs them itself.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Job:
    """One unit of work: ``handler(payload)`` on some worker."""

    job_id: str
    handler: str
    payload: dict = field(default_factory=dict)


@dataclass(frozen=True)
class JobResult:
    """What came back: ``result`` when ``ok``, else ``error`` (a worker that died is an error too)."""

    job_id: str
    ok: bool
    result: dict | None = None
    error: str = ""
    worker: str = ""
    seconds: float = 0.0


class Executor(abc.ABC):
    """Runs jobs; at most one job at a time per worker (one worker per GPU keeps timings apart)."""

    @abc.abstractmethod
    def submit(self, job: Job) -> None:
        """Queues a job; returns at once."""

    @abc.abstractmethod
    def results(self, timeout: float | None = None) -> Iterator[JobResult]:
        """Yields results as jobs finish, until none is pending (or ``timeout`` seconds pass)."""

    @abc.abstractmethod
    def cancel_pending(self) -> int:
        """Drops queued jobs that have not started; returns how many."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stops every worker."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
