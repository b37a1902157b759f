"""Local executor: one long-lived worker process per device, pinned with CUDA_VISIBLE_DEVICES.

Each worker handles one job at a time, so two timings never share a GPU. A worker that dies (or
whose job exceeds its timeout) is replaced; its job comes back as an error, never a lost job.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from loopwise.core.execute._base import Executor, Job, JobResult, pick

_POLL_S = 0.05


def _resolve(handler: str):
    module, _, name = handler.partition(":")
    return getattr(importlib.import_module(module), name)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _worker_main(conn, env: dict[str, str]) -> None:
    """Worker loop: environment first (before torch can see the GPUs), then jobs until told to stop."""
    # SIGTERM (the executor closing while a job runs) exits through the job's ``finally`` blocks,
    # which kill the processes it started (a sandbox compiling for minutes); the default action
    # would end this process alone and leave them running.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    os.environ.update(env)
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        job: Job = message
        t0 = time.perf_counter()
        try:
            result = _resolve(job.handler)(job.payload)
            conn.send(JobResult(job.job_id, True, result, seconds=time.perf_counter() - t0))
        except Exception as exc:  # noqa: BLE001 - a handler error is the job's result
            text = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
            conn.send(JobResult(job.job_id, False, error=text, seconds=time.perf_counter() - t0))


@dataclass
class _Worker:
    name: str
    env: dict[str, str]
    proc: mp.Process | None = None
    conn: object = None
    job: Job | None = None
    started: float = 0.0
    served: set = field(default_factory=set)  # affinities of the jobs this process has run


class LocalExecutor(Executor):
    """Workers named by device: ``LocalExecutor(["0", "1"])`` pins one worker to each GPU;
    ``LocalExecutor(["cpu", "cpu"])`` runs two CPU workers (tests, CPU-only work).

    Every job runs on these workers, whatever its ``Job.needs``: there is no separate CPU pool.
    """

    def __init__(self, devices: list[str], job_timeout_s: float | None = None) -> None:
        self._ctx = mp.get_context("spawn")
        self._queue: deque[Job] = deque()
        self._timeout = job_timeout_s
        self._workers = [_Worker(f"worker-{i}:{d}", self._env_for(d)) for i, d in enumerate(devices)]
        for w in self._workers:
            self._start(w)

    @staticmethod
    def _env_for(device: str) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": "" if device == "cpu" else device}

    def _start(self, w: _Worker) -> None:
        parent, child = self._ctx.Pipe()
        # Not a daemon: a worker starts processes of its own (sandboxes). It ends when the pipe
        # closes, so it does not outlive the driver.
        w.proc = self._ctx.Process(target=_worker_main, args=(child, w.env), daemon=False, name=w.name)
        w.proc.start()
        child.close()
        w.conn, w.job = parent, None
        w.served = set()  # a new process holds nothing

    def _restart(self, w: _Worker) -> None:
        if w.proc is not None and w.proc.is_alive():
            w.proc.kill()
        if w.proc is not None:
            w.proc.join(timeout=5)
        self._start(w)

    def submit(self, job: Job) -> None:
        """Queues ``job``; workers get jobs in :meth:`results`, once every job submitted before it
        is queued too, so each free worker can choose among all of them (:func:`pick`)."""
        self._queue.append(job)

    def _dispatch(self) -> None:
        anyone = set().union(*(w.served for w in self._workers))
        for w in self._workers:
            if w.job is None and self._queue:
                i = pick(self._queue, w.served, anyone)
                w.job, w.started = self._queue[i], time.monotonic()
                del self._queue[i]
                if w.job.affinity:
                    w.served.add(w.job.affinity)
                    anyone.add(w.job.affinity)
                w.conn.send(w.job)

    def _poll(self, w: _Worker) -> JobResult | None:
        if w.job is None:
            return None
        try:
            if w.conn.poll():
                result = w.conn.recv()
                w.job = None
                return JobResult(result.job_id, result.ok, result.result, result.error, w.name, result.seconds)
        except (EOFError, OSError):
            pass
        expired = self._timeout is not None and time.monotonic() - w.started > self._timeout
        if w.proc.is_alive() and not expired:
            return None
        why = f"job exceeded {self._timeout:.0f}s" if expired else f"worker died (exit code {w.proc.exitcode})"
        lost = JobResult(w.job.job_id, False, error=why, worker=w.name, seconds=time.monotonic() - w.started)
        self._restart(w)
        return lost

    def results(self, timeout: float | None = None) -> Iterator[JobResult]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._queue or any(w.job is not None for w in self._workers):
            self._dispatch()
            got = False
            for w in self._workers:
                result = self._poll(w)
                if result is not None:
                    got = True
                    self._dispatch()
                    yield result
            if deadline is not None and time.monotonic() > deadline:
                return
            if not got:
                time.sleep(_POLL_S)

    def cancel_pending(self) -> int:
        n = len(self._queue)
        self._queue.clear()
        return n

    def close(self) -> None:
        self._queue.clear()
        for w in self._workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
            if w.proc is not None and w.job is not None and w.proc.is_alive():
                # a job under way (the driver was stopped): it will not read the None before it
                # ends, minutes later; SIGTERM ends it and the processes it started
                w.proc.terminate()
        for w in self._workers:
            if w.proc is None:
                continue
            w.proc.join(timeout=2)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=5)

    @property
    def workers(self) -> list[str]:
        return [w.name for w in self._workers]
