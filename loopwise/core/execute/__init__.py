"""Executors: where jobs run. ``LocalExecutor`` now; a Ray executor plugs into the same base."""

from loopwise.core.execute._base import Executor, Job, JobResult
from loopwise.core.execute._local import LocalExecutor

__all__ = ["Executor", "Job", "JobResult", "LocalExecutor"]
