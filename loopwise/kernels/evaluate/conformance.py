"""The tests every judge must pass. Needs pytest, so it is not imported by the package.

Use it by subclassing in a test module::

    class TestMyJudge(JudgeConformance):
        @pytest.fixture
        def judge(self, problem, config):
            with MyJudge(problem, config) as judge:
                yield judge

The contract is the optimize loop's view (:class:`loopwise.kernels.evaluate.Judge`): one verdict
per candidate, in the order asked, each an ``Evaluation`` naming its candidate; whatever a candidate
does (wrong numbers, a crash, code that does not compile) is a status, never an exception; the
same candidate gets the same verdict however it is asked for; ``precompile`` says how many it built.
The cases are the judge's own (a correct PyTorch candidate, a wrong scale, a segfault, a syntax
error) on a small matmul + ReLU problem, judged on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate import Judge
from loopwise.kernels.evaluate.result import Evaluation, Status
from loopwise.kernels.problem import Problem, load_problem

EXPECTED = {"ok_torch": Status.CORRECT, "wrong_scale": Status.WRONG_OUTPUT, "segfault": Status.CRASH,
            "syntax_error": Status.COMPILE_ERROR}


class JudgeConformance:
    """Behaviour shared by every judge; subclass it and give a ``judge`` fixture."""

    CASES: Path  # the folder holding problem_matmul_relu.py and the candidates named in EXPECTED

    @pytest.fixture
    def problem(self) -> Problem:
        return load_problem(str(self.CASES / "problem_matmul_relu.py"))

    @pytest.fixture
    def config(self) -> EvalConfig:
        return EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=3, seed=1, energy=False)

    def _source(self, name: str) -> str:
        return (self.CASES / f"{name}.py").read_text()

    def test_it_is_a_judge_with_a_device(self, judge) -> None:
        assert isinstance(judge, Judge)
        assert isinstance(judge.device, str) and judge.device
        assert isinstance(judge.device_name, str) and judge.device_name

    def test_a_batch_gets_one_verdict_per_candidate_in_order_failures_as_statuses(self, judge) -> None:
        names = list(EXPECTED)
        verdicts = judge.evaluate_many([(self._source(n), n) for n in reversed(names)])
        assert all(isinstance(v, Evaluation) for v in verdicts)
        assert [v.candidate for v in verdicts] == list(reversed(names))
        assert {v.candidate: v.status for v in verdicts} == EXPECTED, [v.summary() for v in verdicts]
        assert all(v.reasons for v in verdicts if v.status is not Status.CORRECT)  # each failure says why

    def test_one_candidate_alone_gets_the_verdict_it_gets_in_a_batch(self, judge) -> None:
        alone = judge.evaluate(self._source("wrong_scale"), "alone")
        assert alone.candidate == "alone" and alone.status is Status.WRONG_OUTPUT

    def test_precompile_says_how_many_it_built(self, judge) -> None:
        built = judge.precompile([self._source("ok_torch"), self._source("syntax_error")])
        assert isinstance(built, int) and built == 0  # neither is a native extension
