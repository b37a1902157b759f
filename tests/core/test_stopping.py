"""Work on threads other than the main one stops when told to: a wait on another process raises
``Stopped`` within a poll, nothing queued starts, and a thread stuck where nothing checks is left
behind after the grace period instead of holding the command."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from loopwise.core import stopping


def test_a_thread_waiting_on_a_future_stops_within_a_poll_and_other_threads_never_do():
    stop = threading.Event()
    never: Future = Future()
    threads = stopping.StoppableThreads(1, stop)
    waiting = threads.submit(stopping.wait, [never])
    queued = threads.submit(time.sleep, 0)
    time.sleep(0.3)
    assert not waiting.done()
    t0 = time.monotonic()
    assert threads.stop(grace_s=5.0)
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(stopping.Stopped):
        waiting.result(timeout=0)
    assert queued.cancelled()  # nothing queued starts once told to stop
    stop.set()  # the main thread (no stop event bound) is never stopped by anyone's event
    assert not stopping.requested()
    stopping.check()
    stopping.wait([never], timeout=0.2)


def test_a_thread_stuck_where_nothing_checks_is_left_behind_after_the_grace():
    stop, release = threading.Event(), threading.Event()
    threads = stopping.StoppableThreads(1, stop)
    stuck = threads.submit(release.wait, 30)
    time.sleep(0.1)
    t0 = time.monotonic()
    assert not threads.stop(grace_s=0.5)
    assert 0.4 < time.monotonic() - t0 < 2.0
    assert all(t.daemon for t in threads._threads)  # the interpreter's exit does not wait for it
    release.set()
    assert stuck.result(timeout=5) is True


def test_threads_run_every_call_in_order_and_give_back_results_and_errors():
    threads = stopping.StoppableThreads(1, threading.Event())
    futures = [threads.submit(lambda i: i * 2, i) for i in range(3)] + [threads.submit(int, "x")]
    threads.shutdown()
    assert [f.result() for f in futures[:3]] == [0, 2, 4]
    with pytest.raises(ValueError):
        futures[3].result()
