"""Ray executor: one long-lived Ray actor per GPU for GPU jobs, plain Ray tasks for CPU jobs.

Like the local executor, each actor runs one job at a time (two timings never share a GPU) and
keeps its state between jobs (the kernel handler caches one judge per problem). A job whose actor,
worker or node died is retried on another or a replacement actor, at most ``max_retries`` times;
a job over its time limit is stopped and comes back as an error. Ray is imported only when a
``RayExecutor`` is built, so loopwise works without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Callable

from loopwise.core.execute._base import Executor, Job, JobResult, pick
from loopwise.core.execute._local import _resolve
from loopwise.errors import UserError

LOG_TAIL_CHARS = 20_000
"""How much of a job's printed output ``JobResult.log`` keeps (the end of it)."""

_LOG_SENT_CHARS = 1_000_000  # what a worker sends back; ``log_dir`` files get all of it
_WAIT_CAP_S = 0.5  # longest single ray.wait, so timeouts and deadlines are checked often enough
_TASK_NAME = "ray-task:cpu"


# --- worker side: runs inside Ray actors and tasks ------------------------------------------


@contextlib.contextmanager
def _output_to(sink: IO[bytes]) -> Iterator[None]:
    """Points file descriptors 1 and 2 at ``sink``, so prints, C code and child processes all
    land in the job's log (a worker runs one job at a time, so nothing else writes meanwhile)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(sink.fileno(), 1)
    os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def _tail(sink: IO[bytes], chars: int) -> str:
    size = sink.seek(0, os.SEEK_END)
    sink.seek(max(0, size - 4 * chars))  # 4 bytes per character at most in UTF-8
    return sink.read().decode(errors="replace")[-chars:]


def _run_job(job: Job, worker: str) -> JobResult:
    """``handler(payload)`` with its output captured; a handler error is the job's result."""
    with tempfile.TemporaryFile() as sink:
        t0 = time.perf_counter()
        with _output_to(sink):
            try:
                outcome: dict[str, Any] = {"ok": True, "result": _resolve(job.handler)(job.payload)}
            except Exception as exc:  # noqa: BLE001 - a handler error is the job's result
                text = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
                outcome = {"ok": False, "error": text}
        seconds = time.perf_counter() - t0
        return JobResult(job.job_id, worker=worker, seconds=seconds, log=_tail(sink, _LOG_SENT_CHARS), **outcome)


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


class _JobActor:
    """The body of a Ray actor: alive across jobs, so what a handler caches stays warm."""

    def __init__(self, label: str, gpu: bool) -> None:
        import ray

        if gpu:
            label += ",".join(str(i) for i in ray.get_gpu_ids())
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a CPU stand-in: keep torch off the GPUs
        self._name = f"{label}@{_node_ip()}"

    def ready(self) -> str:
        return self._name

    def run(self, job: Job) -> JobResult:
        return _run_job(job, self._name)


def _run_task(job: Job) -> JobResult:
    return _run_job(job, f"{_TASK_NAME}@{_node_ip()}")


# --- driver side ------------------------------------------------------------------------------


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UserError("the Ray executor needs Ray, which is not installed: pip install 'loopwise[ray]'") from exc
    return ray


def _first_line(exc: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()  # Ray colours some messages
    return text.splitlines()[0] if text else type(exc).__name__


def _check_reachable(address: str) -> None:
    """Fails fast on a ``host:port`` nobody answers at (Ray itself would retry for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local": Ray resolves these itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise UserError(f"cannot connect to the Ray cluster at {address!r}: {exc.strerror or exc}") from None


def _connect(ray: Any, address: str | None) -> bool:
    """Connects this process to Ray, starting a local cluster when ``address`` is None (unless
    ``RAY_ADDRESS`` names one); returns whether this call did it (and so owns the shutdown)."""
    if ray.is_initialized():
        return False
    if address:
        _check_reachable(address)
    # ray.init puts its own SIGTERM handler in (abseil's: a stack dump, then the process ends);
    # the one the program had, such as the CLI's clean stop, goes back afterwards.
    previous = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    except Exception as exc:  # noqa: BLE001 - any failure here is a setup problem to report in one line
        where = f"connect to the Ray cluster at {address!r}" if address else "start a local Ray cluster"
        raise UserError(f"cannot {where}: {_first_line(exc)}") from None
    finally:
        if callable(previous) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)
    return True


def _cluster_messages_to_stderr(ray: Any) -> Callable[[], None]:
    """Sends what Ray's driver prints about the cluster (``(raylet) The node with node id ... has been
    marked dead``) to stderr while this process holds the connection it made: Ray writes it to
    stdout, where a command's ``--json`` document goes, and it is diagnostics. Ray keeps no public
    setting for this; its error listener looks its printer up as a module function on each call, so
    that function is wrapped. Returns what puts it back (at the shutdown of that connection, so a
    later ``ray.init`` of the user's own prints as Ray does). A Ray without it is left as it is."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    printer = getattr(worker, "print_to_stdstream", None)
    if not callable(printer) or getattr(printer, "_loopwise_stderr", False):
        return lambda: None

    def to_stderr(data: dict, *args: Any, **kwargs: Any) -> Any:
        return printer({**data, "is_err": True}, *args, **kwargs)

    def put_back() -> None:
        if worker.print_to_stdstream is to_stderr:
            worker.print_to_stdstream = printer

    to_stderr._loopwise_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr
    return put_back


def _lost_worker_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Errors that mean the job's process or node went away, not that the job failed."""
    ex = ray.exceptions
    names = ("RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError", "LocalRayletDiedError")
    return tuple(getattr(ex, name) for name in names if hasattr(ex, name))


@dataclass
class _Slot:
    """One actor position; its actor is replaced when it dies or runs over time."""

    label: str
    gpu: bool
    actor: Any = None
    starting: Any = None  # the actor's ready() reference, until the actor is known to be up
    busy: bool = False
    served: set = field(default_factory=set)  # affinities of the jobs this actor has run


@dataclass
class _Run:
    """A job in flight: which attempt, where, and since when (None while its actor starts)."""

    job: Job
    attempt: int
    slot: _Slot | None  # None: a plain Ray task
    started: float | None


def _plan(devices: list[str] | None, resources: dict[str, float]) -> tuple[list[_Slot], int]:
    """The actor slots for ``devices`` and how many CPU tasks may run at once beside them."""
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    if devices is None:
        if gpus == 0:
            raise UserError("the Ray cluster has no GPUs; pass devices=['cpu', ...] for CPU workers")
        devices = ["gpu"] * gpus
    want_gpus = sum(d != "cpu" for d in devices)
    want_cpus = len(devices) - want_gpus
    if not devices or want_gpus > gpus or want_cpus > cpus:
        raise UserError(f"asked for {want_gpus} GPU and {want_cpus} CPU workers, but the Ray cluster "
                        f"has {gpus} GPUs and {cpus} CPUs")
    slots = [_Slot(f"ray-worker-{i}:{'cpu' if d == 'cpu' else 'GPU'}", d != "cpu") for i, d in enumerate(devices)]
    # CPU jobs use the CPUs the stand-in actors leave free (at least one: Ray queues it).
    return slots, max(1, cpus - want_cpus)


def gpu_actor_threads(resources: dict[str, float]) -> int:
    """Host threads for each GPU actor: the cluster's CPUs shared evenly among its GPUs."""
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    return max(1, cpus // max(1, gpus))


class RayExecutor(Executor):
    """Runs jobs on a Ray cluster: GPU jobs on one actor per GPU, CPU jobs as Ray tasks.

    Args:
        devices: one entry per actor: ``"cpu"`` makes a CPU stand-in actor (one CPU, no GPU: tests,
            CPU-only machines); any other entry asks for one GPU, which Ray picks. None: one GPU
            actor per GPU the cluster has.
        address: the cluster to connect to (``"auto"``, ``"host:6379"``, ``"ray://host:10001"``,
            the last needing ``ray[client]``); None starts a local cluster (or uses ``RAY_ADDRESS``).
            A process already connected to Ray (``ray.init`` was called) keeps that connection.
        job_timeout_s: a job running longer is stopped (its actor replaced) and comes back as an error.
        max_retries: how many times a job whose worker or node died is run again.
        log_dir: if set, each job's whole captured output is also written to ``<log_dir>/<job_id>.log``.

    Raises:
        UserError: Ray is not installed, the cluster cannot be reached, or it lacks the devices asked for.
    """

    def __init__(
        self,
        devices: list[str] | None = None,
        address: str | None = None,
        job_timeout_s: float | None = None,
        max_retries: int = 2,
        log_dir: str | None = None,
    ) -> None:
        self._ray = _import_ray()
        self._timeout, self._max_retries = job_timeout_s, max_retries
        self._log_dir = Path(log_dir) if log_dir else None
        self._lost_errors = _lost_worker_errors(self._ray)
        self._gpu_queue: deque[tuple[Job, int]] = deque()  # (job, attempts made so far)
        self._cpu_queue: deque[tuple[Job, int]] = deque()
        self._running: dict[Any, _Run] = {}  # ObjectRef -> run
        self._slots: list[_Slot] = []
        self._closed = False
        self._owns_ray = _connect(self._ray, address)
        self._put_back_printer = _cluster_messages_to_stderr(self._ray) if self._owns_ray else (lambda: None)
        try:
            resources = self._ray.cluster_resources()
            self._slots, self._task_limit = _plan(devices, resources)
            self._gpu_threads = gpu_actor_threads(resources)
        except UserError:
            self.close()
            raise
        self._actor_class = self._ray.remote(_JobActor)
        self._task = self._ray.remote(_run_task).options(num_cpus=1, max_retries=0)
        for slot in self._slots:
            self._start(slot)

    def _start(self, slot: _Slot) -> None:
        resources = {"num_gpus": 1} if slot.gpu else {"num_cpus": 1, "num_gpus": 0}
        if slot.gpu:
            # Ray gives an actor that asks for no CPU one host thread (OMP_NUM_THREADS=1), and a
            # GPU job's host work (a multi-GiB problem's draws and copies kept on the host) would
            # run on it alone; a value set here Ray leaves as it is
            resources["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": str(self._gpu_threads)}}
        options = self._actor_class.options(max_concurrency=1, max_restarts=0, **resources)
        slot.actor = options.remote(slot.label, slot.gpu)
        slot.starting, slot.busy, slot.served = slot.actor.ready.remote(), False, set()

    def _replace(self, slot: _Slot) -> None:
        with contextlib.suppress(Exception):  # it may be gone already
            self._ray.kill(slot.actor, no_restart=True)
        self._start(slot)

    @property
    def workers(self) -> list[str]:
        """The actors' names, ``ray-worker-<i>:GPU`` or ``ray-worker-<i>:cpu``; a result's ``worker``
        adds the GPU index and the node's IP when the actor reported them (``ray-worker-0:GPU3@10.0.0.5``)."""
        return [slot.label for slot in self._slots]

    def submit(self, job: Job) -> None:
        if self._closed:
            raise RuntimeError("this RayExecutor is closed")
        (self._cpu_queue if job.needs == "cpu" else self._gpu_queue).append((job, 0))

    def _dispatch(self) -> None:
        now = time.monotonic()
        anyone = set().union(*(slot.served for slot in self._slots))
        for slot in self._slots:
            if not slot.busy and self._gpu_queue:
                i = pick([job for job, _ in self._gpu_queue], slot.served, anyone)
                job, tries = self._gpu_queue[i]
                del self._gpu_queue[i]
                if job.affinity:
                    slot.served.add(job.affinity)
                    anyone.add(job.affinity)
                slot.busy = True
                started = None if slot.starting is not None else now
                self._running[slot.actor.run.remote(job)] = _Run(job, tries + 1, slot, started)
        tasks = sum(run.slot is None for run in self._running.values())
        while self._cpu_queue and tasks < self._task_limit:
            job, tries = self._cpu_queue.popleft()
            self._running[self._task.remote(job)] = _Run(job, tries + 1, None, now)
            tasks += 1

    def results(self, timeout: float | None = None) -> Iterator[JobResult]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._gpu_queue or self._cpu_queue or self._running:
            self._dispatch()
            self._note_started()
            for ref in self._wait(deadline):
                result = self._finish(ref)
                if result is not None:
                    self._dispatch()
                    yield result
            for result in self._expire():
                self._dispatch()
                yield result
            if deadline is not None and time.monotonic() >= deadline:
                return

    def _note_started(self) -> None:
        """Starts a job's clock once its actor is up, so actor start-up never counts as job time."""
        starting = {slot.starting: slot for slot in self._slots if slot.starting is not None}
        if not starting:
            return
        up, _ = self._ray.wait(list(starting), num_returns=len(starting), timeout=0)
        now = time.monotonic()
        for ref in up:
            starting[ref].starting = None
            for run in self._running.values():
                if run.slot is starting[ref] and run.started is None:
                    run.started = now

    def _wait(self, deadline: float | None) -> list[Any]:
        """Waits for one job to finish (or an actor to come up); returns the finished jobs' refs."""
        refs = list(self._running) + [slot.starting for slot in self._slots if slot.starting is not None]
        if not refs:
            return []
        now = time.monotonic()
        ends = [now + _WAIT_CAP_S] + ([deadline] if deadline is not None else [])
        if self._timeout is not None:
            ends += [run.started + self._timeout for run in self._running.values() if run.started is not None]
        done, _ = self._ray.wait(refs, num_returns=1, timeout=max(0.0, min(ends) - now))
        return [ref for ref in done if ref in self._running]

    def _finish(self, ref: Any) -> JobResult | None:
        """The result of a finished job, or None when its worker died and it was queued again."""
        run = self._running.pop(ref)
        if run.slot is not None:
            run.slot.busy = False
        try:
            result = self._ray.get(ref)
        except self._lost_errors as exc:
            return self._lost(run, exc)
        except Exception as exc:  # noqa: BLE001 - Ray could not run or return the job: its result
            result = JobResult(run.job.job_id, False, error=f"{type(exc).__name__}: {exc}", worker=self._where(run))
        return self._deliver(result, run.attempt)

    def _lost(self, run: _Run, exc: Exception) -> JobResult | None:
        if run.slot is not None:
            self._replace(run.slot)
        if run.attempt <= self._max_retries:
            (self._gpu_queue if run.slot is not None else self._cpu_queue).appendleft((run.job, run.attempt))
            return None
        why = f"worker died after {run.attempt} attempts ({type(exc).__name__}: {_first_line(exc)})"
        return self._deliver(JobResult(run.job.job_id, False, error=why, worker=self._where(run)), run.attempt)

    def _expire(self) -> Iterator[JobResult]:
        """Stops jobs over the time limit: the actor is replaced, a task's process killed."""
        if self._timeout is None:
            return
        for ref, run in list(self._running.items()):
            now = time.monotonic()
            if run.started is None or now - run.started <= self._timeout:
                continue
            if self._ray.wait([ref], timeout=0)[0]:
                continue  # it finished just in time; collected on the next round
            del self._running[ref]
            if run.slot is not None:
                self._replace(run.slot)
            else:
                self._ray.cancel(ref, force=True)
            error = f"job exceeded {self._timeout:g}s"
            yield self._deliver(JobResult(run.job.job_id, False, error=error, worker=self._where(run),
                                          seconds=now - run.started), run.attempt)

    @staticmethod
    def _where(run: _Run) -> str:
        return run.slot.label if run.slot is not None else _TASK_NAME

    def _deliver(self, result: JobResult, attempts: int) -> JobResult:
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9._-]", "_", result.job_id) + ".log"
            trailer = "" if result.ok else f"\n--- error ---\n{result.error}\n"
            (self._log_dir / name).write_text(result.log + trailer)
        return replace(result, log=result.log[-LOG_TAIL_CHARS:], attempts=attempts)

    def cancel_pending(self) -> int:
        dropped = len(self._gpu_queue) + len(self._cpu_queue)
        self._gpu_queue.clear()
        self._cpu_queue.clear()
        return dropped

    def close(self) -> None:
        """Stops running jobs, kills the actors, and shuts Ray down if this executor started it."""
        if self._closed:
            return
        self._closed = True
        self.cancel_pending()
        for ref, run in self._running.items():
            if run.slot is None:
                with contextlib.suppress(Exception):
                    self._ray.cancel(ref, force=True)
        self._running.clear()
        for slot in self._slots:
            with contextlib.suppress(Exception):
                self._ray.kill(slot.actor, no_restart=True)
        if self._owns_ray:
            self._ray.shutdown()
            self._put_back_printer()
