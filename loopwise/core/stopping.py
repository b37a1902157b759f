"""Stopping work that runs on threads other than the main one.

Ctrl-C and SIGTERM reach the main thread only (the command line raises SIGTERM there as a
``KeyboardInterrupt``). Work a command runs on other threads (a bench's problems, one search
each) never sees them: such a thread waiting on a sandbox's verdict or on a torch.compile in a
child process would run on until that ended, minutes later, and a command that waited for it
would not stop. So that work runs on :class:`StoppableThreads`, each thread under a stop event
(:func:`bound`); every wait on another process checks it (:func:`check`, :func:`wait`), ends that
process's work and raises :class:`Stopped`, which unwinds the thread through its ``with`` and
``finally`` blocks as the interrupt unwinds the main thread. A thread held where nothing checks
(a long call into C, a proposer's network request) is left behind after a grace period: the
threads are daemons, so the process still exits.

In the main thread, and in any thread not bound to a stop event, nothing here ever stops anything.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

__all__ = ["POLL_S", "Stopped", "StoppableThreads", "bound", "check", "requested", "wait"]

POLL_S = 0.1  # how often a wait on another thread's future looks at the stop event

_local = threading.local()


class Stopped(KeyboardInterrupt):
    """Raised in a thread whose stop event is set, at a wait that checks it. A ``KeyboardInterrupt``,
    so no ``except Exception`` on the way takes it for a failure of the work itself (a verdict, a
    measurement that would be recorded as finished and never redone)."""


@contextmanager
def bound(event: threading.Event) -> Iterator[threading.Event]:
    """Runs the body with ``event`` as the current thread's stop event."""
    previous = getattr(_local, "event", None)
    _local.event = event
    try:
        yield event
    finally:
        _local.event = previous


def requested() -> bool:
    """Whether the current thread has been told to stop (never, in a thread without a stop event)."""
    event = getattr(_local, "event", None)
    return event is not None and event.is_set()


def check() -> None:
    """Raises :class:`Stopped` when the current thread has been told to stop."""
    if requested():
        raise Stopped()


def wait(futures: Iterable[Future], timeout: float | None = None) -> None:
    """Waits until every future is done or ``timeout`` seconds have passed (as
    ``concurrent.futures.wait``), and raises :class:`Stopped` as soon as the current thread is told
    to stop."""
    from concurrent.futures import wait as wait_all

    futures = list(futures)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        check()
        left = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
        if left <= 0:
            return
        if not wait_all(futures, timeout=left).not_done:
            return


class StoppableThreads:
    """Calls run on ``workers`` daemon threads, each under the stop event ``stop`` (see :func:`bound`),
    in the order submitted; a call that raises (:class:`Stopped` included) fails its future.

    Unlike a ``ThreadPoolExecutor``, whose threads the interpreter joins at exit (however long their
    current call takes), :meth:`stop` waits for the threads a bounded time and leaves the rest."""

    def __init__(self, workers: int, stop: threading.Event, name: str = "loopwise-work") -> None:
        self.event = stop
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def _work(self) -> None:
        with bound(self.event):
            while True:
                item = self._jobs.get()
                if item is None:
                    return
                future, fn, args = item
                if self.event.is_set():  # told to stop: nothing queued starts
                    future.cancel()
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = fn(*args)
                except BaseException as exc:  # noqa: BLE001 - the caller reads it from the future
                    future.set_exception(exc)
                else:
                    future.set_result(result)

    def shutdown(self) -> None:
        """After the last submit: the threads end once every call submitted has run."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()

    def stop(self, grace_s: float) -> bool:
        """Tells every thread to stop (no queued call starts; a running one stops at its next
        check), waits up to ``grace_s`` seconds for them, and returns whether all have ended; a
        thread still running is left to the process's exit."""
        self.event.set()
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + grace_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)
