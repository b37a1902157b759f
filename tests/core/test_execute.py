"""The local executor from a driver's point of view: jobs spread over workers, one at a time each,
a dead or hung worker costs its job (reported) and is replaced, and kernel evaluations run there."""

import time

import pytest

from loopwise.core.execute import Job, LocalExecutor

H = "executor_handlers"


@pytest.fixture()
def executor():
    ex = LocalExecutor(["cpu", "cpu"], job_timeout_s=20)
    yield ex
    ex.close()


def test_jobs_spread_over_workers_one_at_a_time(executor):
    t0 = time.monotonic()
    for i in range(4):
        executor.submit(Job(f"j{i}", f"{H}:sleep", {"seconds": 0.6}))
    results = list(executor.results(timeout=60))
    elapsed = time.monotonic() - t0
    assert sorted(r.job_id for r in results) == ["j0", "j1", "j2", "j3"]
    assert all(r.ok for r in results)
    assert len({r.worker for r in results}) == 2
    assert len({r.result["pid"] for r in results}) == 2  # long-lived: two processes for four jobs
    assert elapsed >= 1.2  # two workers, four jobs of 0.6 s: never more than one job per worker


def test_workers_are_pinned_to_their_device(executor):
    executor.submit(Job("a", f"{H}:echo", {"value": 1}))
    (r,) = list(executor.results(timeout=30))
    assert r.result["cuda_visible"] == ""


def test_dead_worker_costs_its_job_and_is_replaced(executor):
    executor.submit(Job("boom", f"{H}:die", {}))
    executor.submit(Job("after", f"{H}:echo", {"value": 2}))
    executor.submit(Job("raises", f"{H}:fail", {}))
    by_id = {r.job_id: r for r in executor.results(timeout=60)}
    assert not by_id["boom"].ok and "worker died" in by_id["boom"].error
    assert by_id["after"].ok and by_id["after"].result["value"] == 2
    assert not by_id["raises"].ok and "ValueError: bad payload" in by_id["raises"].error
    executor.submit(Job("again", f"{H}:echo", {"value": 3}))
    assert [r.ok for r in executor.results(timeout=30)] == [True]


def test_hung_job_times_out_and_cancel_drops_queued_jobs():
    with LocalExecutor(["cpu"], job_timeout_s=1.0) as ex:
        ex.submit(Job("hang", f"{H}:sleep", {"seconds": 30}))
        ex.submit(Job("next", f"{H}:echo", {"value": 1}))
        ex.submit(Job("queued", f"{H}:echo", {"value": 2}))
        stream = ex.results(timeout=20)
        first = next(stream)
        assert first.job_id == "hang" and not first.ok and "exceeded" in first.error
        assert ex.cancel_pending() == 1  # "next" started on the replacement worker; "queued" is dropped
        assert [r.job_id for r in stream] == ["next"]


# Kernel evaluations on the local executor's workers: tests/core/test_execute_ray.py runs the same three
# on a LocalExecutor and a RayExecutor and asserts both give the expected verdicts.


def test_a_free_worker_prefers_jobs_whose_state_it_already_holds():
    """pick(): the worker's own affinity first, then one nobody holds, then the oldest job: a
    free worker never waits while jobs are queued."""
    from loopwise.core.execute._base import pick

    jobs = [Job("a1", "h", affinity="A"), Job("b1", "h", affinity="B"), Job("c1", "h", affinity="C"),
            Job("b2", "h", affinity="B")]
    assert pick(jobs, mine={"B"}, anyone={"A", "B"}) == 1  # its own problem, ahead of older jobs
    assert pick(jobs, mine=set(), anyone={"A", "B"}) == 2  # a problem no worker has built yet
    assert pick(jobs, mine=set(), anyone={"A", "B", "C"}) == 0  # else the oldest: never idle
    assert pick([Job("x", "h"), Job("a", "h", affinity="A")], mine=set(), anyone={"A"}) == 0


def test_jobs_of_one_problem_stay_on_the_worker_that_holds_its_state(executor):
    """Six jobs of two problems submitted at once on two workers: each worker serves one problem
    (builds its judge once) instead of both building both."""
    for i in range(3):
        for key in ("A", "B"):
            executor.submit(Job(f"{key}{i}", f"{H}:sleep", {"seconds": 0.4}, affinity=key))
    results = list(executor.results(timeout=60))
    assert all(r.ok for r in results) and len(results) == 6
    workers = {key: {r.worker for r in results if r.job_id.startswith(key)} for key in ("A", "B")}
    assert len(workers["A"]) == 1 and len(workers["B"]) == 1 and workers["A"] != workers["B"], workers
