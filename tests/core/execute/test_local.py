"""The local executor from a driver's point of view: the executor contract every executor passes
(``loopwise.core.execute.conformance``), plus what is the local executor's own: workers pinned to
their device, and how a free worker picks its next job."""

import pytest

from loopwise.core.execute import Job, LocalExecutor
from loopwise.core.execute.conformance import ExecutorConformance

H = "executor_handlers"


class TestLocalExecutor(ExecutorConformance):
    def make_executor(self, devices, job_timeout_s):
        return LocalExecutor(devices, job_timeout_s=job_timeout_s)


@pytest.fixture()
def executor():
    ex = LocalExecutor(["cpu", "cpu"], job_timeout_s=20)
    yield ex
    ex.close()


def test_workers_are_pinned_to_their_device(executor):
    executor.submit(Job("a", f"{H}:echo", {"value": 1}))
    (r,) = list(executor.results(timeout=30))
    assert r.result["cuda_visible"] == ""


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


def test_a_resume_line_names_the_executor_the_run_was_started_on():
    from loopwise.core.execute.dispatch import executor_options

    assert executor_options("local", None, None) == []
    assert executor_options("local", "0,1", None) == ["--workers", "0,1"]
    assert executor_options("ray", None, "auto") == ["--executor", "ray", "--ray-address", "auto"]
    assert executor_options("ray", "cpu,cpu", "ray://head:10001") == ["--executor", "ray", "--workers", "cpu,cpu",
                                                                     "--ray-address", "ray://head:10001"]
