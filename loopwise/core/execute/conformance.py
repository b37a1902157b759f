"""The tests every executor must pass. Needs pytest, so it is not imported by the package.

Use it by subclassing in a test module whose folder holds the job handlers it names (a module
``executor_handlers`` with ``echo``, ``sleep``, ``interval``, ``die`` and ``fail``; see
``tests/core/execute/executor_handlers.py``)::

    class TestMyExecutor(ExecutorConformance):
        def make_executor(self, devices, job_timeout_s):
            return MyExecutor(devices, job_timeout_s=job_timeout_s)

The contract is the driver's view: jobs spread over workers with at most one job at a time on a
worker, a free worker keeps to the problem whose state it holds, a handler's exception and a
worker's death are results (never exceptions in the driver), a hung job times out and its worker
is replaced, cancelling drops only jobs not started, and CPU jobs run too.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator

import pytest

from loopwise.core.execute._base import Executor, Job

H = "executor_handlers"


class ExecutorConformance:
    """Behaviour shared by every ``Executor``; subclass it and implement ``make_executor``."""

    def make_executor(self, devices: list[str], job_timeout_s: float) -> Executor:
        """Returns a started executor with one worker per entry of ``devices``."""
        raise NotImplementedError

    def wait_ready(self, executor: Executor) -> None:
        """Blocks until every worker can take a job (an executor whose workers start lazily
        overrides it: a worker still starting makes another take its problem, by design)."""

    @pytest.fixture
    def two(self) -> Iterator[Executor]:
        ex = self.make_executor(["cpu", "cpu"], 60)
        yield ex
        ex.close()

    def test_jobs_spread_over_workers_one_at_a_time(self, two: Executor) -> None:
        for i in range(4):
            two.submit(Job(f"j{i}", f"{H}:interval", {"seconds": 0.3}))
        results = list(two.results(timeout=120))
        assert sorted(r.job_id for r in results) == ["j0", "j1", "j2", "j3"]
        assert all(r.ok for r in results), [r.error for r in results]
        by_worker = defaultdict(list)
        for r in results:
            by_worker[r.worker].append((r.result["start"], r.result["end"]))
        assert len(by_worker) == 2
        for intervals in by_worker.values():  # never two jobs at once on one worker
            intervals.sort()
            assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(intervals))
        assert len({r.result["pid"] for r in results}) == 2  # long-lived: two processes for four jobs

    def test_jobs_of_one_problem_stay_on_the_worker_that_holds_its_state(self, two: Executor) -> None:
        self.wait_ready(two)
        for i in range(3):
            for key in ("A", "B"):
                two.submit(Job(f"{key}{i}", f"{H}:interval", {"seconds": 0.3}, affinity=key))
        results = list(two.results(timeout=120))
        assert all(r.ok for r in results) and len(results) == 6
        pids = {key: {r.result["pid"] for r in results if r.job_id.startswith(key)} for key in ("A", "B")}
        assert len(pids["A"]) == 1 and len(pids["B"]) == 1 and pids["A"] != pids["B"], pids

    def test_a_handlers_exception_is_a_result_and_the_worker_serves_on(self, two: Executor) -> None:
        two.submit(Job("raises", f"{H}:fail", {}))
        (r,) = list(two.results(timeout=60))
        assert not r.ok and r.attempts == 1 and "ValueError: bad payload" in r.error
        two.submit(Job("after", f"{H}:echo", {"value": 2}))
        assert [(r.ok, r.result["value"]) for r in two.results(timeout=60)] == [(True, 2)]

    def test_a_worker_that_dies_costs_only_its_job(self, two: Executor) -> None:
        two.submit(Job("boom", f"{H}:die", {}))
        two.submit(Job("beside", f"{H}:echo", {"value": 1}))
        by_id = {r.job_id: r for r in two.results(timeout=120)}
        assert not by_id["boom"].ok and "worker died" in by_id["boom"].error
        assert by_id["beside"].ok and by_id["beside"].result["value"] == 1
        two.submit(Job("again", f"{H}:echo", {"value": 3}))  # a replacement worker serves on
        assert [(r.ok, r.result["value"]) for r in two.results(timeout=60)] == [(True, 3)]

    def test_a_hung_job_times_out_and_cancel_drops_only_queued_jobs(self) -> None:
        with self.make_executor(["cpu"], 1.0) as ex:
            ex.submit(Job("hang", f"{H}:sleep", {"seconds": 30}))
            ex.submit(Job("next", f"{H}:echo", {"value": 1}))
            ex.submit(Job("queued", f"{H}:echo", {"value": 2}))
            stream = ex.results(timeout=60)
            first = next(stream)
            assert first.job_id == "hang" and not first.ok and "exceeded" in first.error
            assert ex.cancel_pending() == 1  # "next" started on the replacement; "queued" is dropped
            assert [(r.job_id, r.ok) for r in stream] == [("next", True)]

    def test_cpu_jobs_run_and_come_back(self, two: Executor) -> None:
        for i in range(3):
            two.submit(Job(f"cpu{i}", f"{H}:echo", {"value": i}, needs="cpu"))
        results = sorted(two.results(timeout=120), key=lambda r: r.job_id)
        assert [(r.ok, r.result["value"]) for r in results] == [(True, 0), (True, 1), (True, 2)]

    def test_results_of_an_idle_executor_end_at_once(self, two: Executor) -> None:
        assert list(two.results(timeout=5)) == []
        assert two.cancel_pending() == 0
