"""Every judge implementation satisfies the judge interface the optimize loop talks to, and passes
the judge contract (``loopwise.kernels.evaluate.conformance``): the local judge, and the executor's
judge over real worker processes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from concurrent.futures import Future
from pathlib import Path

import pytest
from judge_doubles import StandInJudge

import loopwise.kernels.evaluate as evaluate
from loopwise.core.execute import JobResult
from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate import Judge
from loopwise.kernels.evaluate.conformance import JudgeConformance
from loopwise.kernels.evaluate.judge import LocalJudge
from loopwise.kernels.evaluate.result import Evaluation, Status
from loopwise.kernels.evaluate.workers import ExecutorJudge
from loopwise.kernels.problem import load_problem

KERNEL_TESTS = Path(__file__).parents[1]
PROBLEM = KERNEL_TESTS / "expert_problems" / "chain.py"
NOT_PYTHON = "this is not python ("


def _judge_classes() -> set[type]:
    """Classes in loopwise.kernels.evaluate that define the judge's methods."""
    found = set()
    for info in pkgutil.iter_modules(evaluate.__path__):
        module = importlib.import_module(f"{evaluate.__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and hasattr(cls, "evaluate_many"):
                found.add(cls)
    return found


def test_the_package_has_the_two_judges_and_no_other():
    assert _judge_classes() == {LocalJudge, ExecutorJudge}


@pytest.mark.parametrize("cls", [LocalJudge, ExecutorJudge, StandInJudge])
def test_every_judge_defines_the_whole_interface(cls):
    for name in ("evaluate", "evaluate_many", "precompile", "close"):
        assert callable(getattr(cls, name, None)), f"{cls.__name__} has no {name}"


class _Dispatcher:
    """Hands each job straight back with a made-up verdict, as a worker would."""

    workers = ["w0"]
    executor = object()

    def __init__(self) -> None:
        self.jobs = []

    def submit(self, job) -> Future:
        self.jobs.append(job)
        ev = Evaluation(status=Status.CORRECT, problem="chain", candidate=job.payload["candidate_name"],
                        speedup=1.5)
        future: Future = Future()
        future.set_result(JobResult(job_id=job.job_id, ok=True, result=ev.model_dump(mode="json"), worker="w0"))
        return future


def test_the_executor_judge_judges_a_batch_in_order_and_builds_nothing_ahead():
    dispatcher = _Dispatcher()
    judge = ExecutorJudge(load_problem(str(PROBLEM)), EvalConfig(), dispatcher)
    assert isinstance(judge, Judge)
    assert judge.device == "remote" and judge.device_name
    assert judge.precompile(["a", "b"]) == 0
    verdicts = judge.evaluate_many([("a", "first"), ("b", "second")])
    assert [v.candidate for v in verdicts] == ["first", "second"]
    assert judge.evaluate("c", "third").candidate == "third"
    assert len(dispatcher.jobs) == 3
    judge.close()


def test_the_local_judge_judges_a_batch_in_order_on_the_cpu():
    """Candidates the static scan rejects never reach a sandbox: the check stays cheap."""
    with LocalJudge(load_problem(str(PROBLEM)), EvalConfig(energy=False), device="cpu", spares=0) as judge:
        assert isinstance(judge, Judge)
        assert judge.device == "cpu" and judge.device_name == "cpu"
        assert judge.precompile([NOT_PYTHON, NOT_PYTHON + "1"]) == 0  # nothing native to build
        verdicts = judge.evaluate_many([(NOT_PYTHON, "first"), (NOT_PYTHON + "2", "second")])
    assert [v.candidate for v in verdicts] == ["first", "second"]
    assert all(v.status is Status.COMPILE_ERROR for v in verdicts)


def test_a_stand_in_judge_satisfies_the_interface():
    assert isinstance(StandInJudge(), Judge)


class TestLocalJudge(JudgeConformance):
    CASES = KERNEL_TESTS / "judge_cases"

    @pytest.fixture
    def judge(self, problem, config):
        with LocalJudge(problem, config, device="cpu", spares=0) as judge:
            yield judge


class TestExecutorJudge(JudgeConformance):
    CASES = KERNEL_TESTS / "judge_cases"

    @pytest.fixture
    def judge(self, problem, config):
        from loopwise.core.execute import LocalExecutor
        from loopwise.core.execute.dispatch import Dispatcher

        executor = LocalExecutor(["cpu", "cpu"], job_timeout_s=120)
        dispatcher = Dispatcher(executor)
        judge = ExecutorJudge(problem, config, dispatcher, device="cpu")
        yield judge
        judge.close()
        dispatcher.close()
        executor.close()


def test_the_local_judge_measures_the_reference_before_any_candidate_and_says_what_it_did_not():
    """On the CPU: the eager time it divides every speedup by, the floor and the CPU's ceilings;
    torch.compile is not timed there (it would cost minutes and mean nothing) and it says so."""
    with LocalJudge(load_problem(str(PROBLEM)), EvalConfig(energy=False, perf_trials=3), device="cpu",
                    spares=0) as judge:
        facts = judge.reference_facts(compile=True)
        assert facts["eager_ms"] == judge.reference_timing().timing.median_ms > 0
    assert facts["device"] == "cpu" and facts["statistic"] == "median"
    assert facts["compile_ms"] is None and "torch.compile time not measured on the CPU" in facts["notes"]
    assert facts["bandwidth_gbs"] > 0 and facts["fp32_tflops"] > 0
    assert facts["floor_ms"] is None or facts["floor_ms"] > 0
    assert set(facts) >= {"eager_ms", "compile_ms", "floor_ms", "floor_bound", "tf32_tflops", "bf16_tflops", "notes"}
