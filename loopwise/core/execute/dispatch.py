"""Between the engines and an executor: many searches (threads) submitting jobs to one executor,
and the executor the command line asks for (``--executor``, ``--workers``, ``--ray-address``)."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future

from loopwise.core.execute._base import Executor, Job, JobResult

log = logging.getLogger(__name__)


class Dispatcher:
    """Many searches (threads) over one executor: ``submit`` returns a future at once; one pump
    thread alone talks to the executor (executors are not thread-safe), feeding it the queued jobs
    and resolving each future when its result comes back."""

    def __init__(self, executor: Executor, poll_s: float = 0.1) -> None:
        self.executor, self._poll = executor, poll_s
        self._inbox: queue.Queue[tuple[Job, Future]] = queue.Queue()
        self._waiting: dict[str, Future] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="loopwise-dispatch", daemon=True)
        self._thread.start()

    @property
    def workers(self) -> list[str]:
        return list(getattr(self.executor, "workers", []) or [])

    def submit(self, job: Job) -> Future:
        future: Future = Future()
        self._inbox.put((job, future))
        return future

    def _pump(self) -> None:
        while not self._stop.is_set():
            while True:
                try:
                    job, future = self._inbox.get_nowait()
                except queue.Empty:
                    break
                self._waiting[job.job_id] = future
                self.executor.submit(job)
            if not self._waiting:
                self._stop.wait(self._poll)
                continue
            try:
                for result in self.executor.results(timeout=self._poll):
                    future = self._waiting.pop(result.job_id, None)
                    if future is not None:
                        future.set_result(result)
            except Exception as exc:  # noqa: BLE001 - the executor broke: every waiting job fails with it
                log.exception("executor failed")
                for job_id in list(self._waiting):
                    self._waiting.pop(job_id).set_result(JobResult(job_id, False, error=f"executor failed: {exc}"))

    def close(self) -> None:
        """Stops the pump (the executor belongs to whoever made it)."""
        self._stop.set()
        self._thread.join(timeout=5)


def parse_workers(spec: str | None) -> list[str] | None:
    """``--workers``: a count of GPUs ("2" -> GPUs 0 and 1), a list of GPU indices ("0,3") or of
    "cpu" stand-ins ("cpu,cpu"); None: the executor's default."""
    from loopwise.errors import UserError

    if spec is None or not spec.strip():
        return None
    spec = spec.strip()
    if spec.isdigit():
        if int(spec) < 1:
            raise UserError("--workers: at least one")
        return [str(i) for i in range(int(spec))]
    items = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [s for s in items if not (s.isdigit() or s == "cpu")]
    if bad or not items:
        raise UserError(f"--workers {spec!r}: expected a count, GPU indices (0,1) or cpu stand-ins (cpu,cpu)")
    return items


def open_executor(kind: str, workers: str | None, ray_address: str | None = None,
                  job_timeout_s: float | None = None) -> Executor | None:
    """The executor ``--executor``/``--workers``/``--ray-address`` ask for, or None for the plain
    in-process judge (``--executor local`` without ``--workers``: one device, no worker processes)."""
    from loopwise.errors import UserError

    devices = parse_workers(workers)
    if kind == "local" and devices is None:
        if ray_address:
            raise UserError("--ray-address needs --executor ray")
        return None
    if kind == "local" and ray_address:
        raise UserError("--ray-address needs --executor ray")
    from loopwise.core.execute import make_executor

    return make_executor(kind, devices=devices, ray_address=ray_address, job_timeout_s=job_timeout_s)


def executor_options(kind: str, workers: str | None, ray_address: str | None = None) -> list[str]:
    """The command-line words that choose this executor again (--executor, --workers,
    --ray-address; none for the default, judging in this process), for a resume line: a run
    started on Ray continues on Ray."""
    words = [] if kind == "local" else ["--executor", kind]
    if workers:
        words += ["--workers", workers]
    if ray_address:
        words += ["--ray-address", ray_address]
    return words


@contextlib.contextmanager
def dispatching(kind: str, workers: str | None, ray_address: str | None = None,
                job_timeout_s: float | None = None) -> Iterator[Dispatcher | None]:
    """A dispatcher over the executor ``open_executor`` makes (None for the in-process path), closed
    with its executor on the way out."""
    executor = open_executor(kind, workers, ray_address, job_timeout_s)
    if executor is None:
        yield None
        return
    dispatcher = Dispatcher(executor)
    try:
        yield dispatcher
    finally:
        dispatcher.close()
        executor.close()

