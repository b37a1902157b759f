"""The Executor role: run jobs somewhere (local worker processes, a Ray cluster) and hand back results.

A job names its handler by import path (``"loopwise.kernels.jobs:evaluate"``), so the executor
knows nothing about engines; handlers return JSON-safe dicts. The search that submits jobs never
runs them itself.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass, field

NEEDS = ("gpu", "cpu")


@dataclass(frozen=True)
class Job:
    """One unit of work: ``handler(payload)`` on some worker.

    ``needs`` says what the job runs on: ``"gpu"`` (timing, profiling: one job at a time per GPU
    worker) or ``"cpu"`` (compiles: any free CPU will do). Executors without a separate CPU pool
    run both kinds on their workers. ``affinity`` names state a worker builds once and reuses
    (a problem's judge: its reference timed on that GPU); a free worker prefers jobs whose
    affinity it has served (see :func:`pick`).
    """

    job_id: str
    handler: str
    payload: dict = field(default_factory=dict)
    needs: str = "gpu"
    affinity: str = ""

    def __post_init__(self) -> None:
        if self.needs not in NEEDS:
            raise ValueError(f"Job.needs must be one of {NEEDS}, got {self.needs!r}")


@dataclass(frozen=True)
class JobResult:
    """What came back: ``result`` when ``ok``, else ``error`` (a worker that died is an error too).

    ``log`` is the tail of what the handler printed, where the executor captures it; ``attempts``
    counts the runs it took (more than one when a worker died and the job was retried).
    """

    job_id: str
    ok: bool
    result: dict | None = None
    error: str = ""
    worker: str = ""
    seconds: float = 0.0
    log: str = ""
    attempts: int = 1


def pick(jobs, mine: set[str], anyone: set[str]) -> int:
    """The position in ``jobs`` (queued, oldest first, non-empty) that a free worker takes: the
    first whose affinity this worker has served (``mine``: no state to build again), else the first
    whose affinity no worker has served (``anyone``) or that has none, else the oldest. A free
    worker never waits while jobs are queued; it only builds what another worker already holds
    when nothing else is left."""
    first_new = None
    for i, job in enumerate(jobs):
        if job.affinity and job.affinity in mine:
            return i
        if first_new is None and (not job.affinity or job.affinity not in anyone):
            first_new = i
    return 0 if first_new is None else first_new


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
