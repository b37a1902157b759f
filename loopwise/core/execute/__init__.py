"""Executors: where jobs run. ``LocalExecutor`` (worker processes on this machine) and
``RayExecutor`` (actors and tasks on a Ray cluster) share one base; ``make_executor`` picks one."""

from loopwise.core.execute._base import Executor, Job, JobResult
from loopwise.core.execute._local import LocalExecutor
from loopwise.core.execute._ray import RayExecutor
from loopwise.errors import UserError

__all__ = ["Executor", "Job", "JobResult", "LocalExecutor", "RayExecutor", "make_executor"]

KINDS = ("local", "ray")


def make_executor(
    kind: str,
    devices: list[str] | None = None,
    ray_address: str | None = None,
    job_timeout_s: float | None = None,
) -> Executor:
    """Builds the executor a user asked for by name.

    Args:
        kind: ``"local"`` (one worker process per device on this machine) or ``"ray"``.
        devices: worker devices (``["0", "1"]``, ``["cpu"]``); None: one worker per GPU there is
            (for ``"local"``, a single ``"cpu"`` worker when torch sees no GPU).
        ray_address: the Ray cluster to connect to; None starts a local one. Only for ``"ray"``.
        job_timeout_s: a job running longer comes back as an error and its worker is replaced.

    Raises:
        UserError: an unknown kind, a Ray address for the local executor, or a Ray setup problem.
    """
    if kind == "ray":
        return RayExecutor(devices, address=ray_address, job_timeout_s=job_timeout_s)
    if kind != "local":
        raise UserError(f"unknown executor {kind!r}; choose one of: {', '.join(KINDS)}")
    if ray_address is not None:
        raise UserError("a Ray address only applies to the 'ray' executor")
    if devices is None:
        import torch  # only here: building a local executor already means running work

        count = torch.cuda.device_count()
        devices = [str(i) for i in range(count)] if count else ["cpu"]
    if not devices:
        raise UserError("the local executor needs at least one device")
    return LocalExecutor(devices, job_timeout_s=job_timeout_s)
