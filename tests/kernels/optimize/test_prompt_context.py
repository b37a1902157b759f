"""The whole context of a kernel proposal, from the model's side: the device and its ceilings with
the reference's eager / torch.compile / floor times from the first prompt on, distinct approaches
per request of a step, the siblings' notes, speedups and code and the best code so far, a size
budget that cuts the least useful context first, and a record of every request and of who made
every candidate."""

from __future__ import annotations

from pathlib import Path

import pytest
from judge_doubles import StandInJudge

from loopwise.core.propose import (Attempt, FindingNote, Proposal, ProposalRequest, prompt_version,
                                   render_prompt)

PROBLEM = Path(__file__).parents[3] / "loopwise" / "kernels" / "examples" / "scaled_gelu_problem.py"
GOOD = (PROBLEM.parent / "scaled_gelu_triton.py").read_text()
H200 = {"device": "NVIDIA H200", "statistic": "median", "eager_ms": 1.25, "compile_ms": 0.9, "floor_ms": 0.31,
        "floor_bound": "memory", "bandwidth_gbs": 4300.0, "fp32_tflops": 50.2, "tf32_tflops": 372.6,
        "bf16_tflops": 790.0, "notes": []}


class MeasuringJudge(StandInJudge):
    """Measured facts as a GPU judge gives them; verdicts by the script ``speeds`` (None: wrong)."""

    def __init__(self, facts, speeds=()):
        self.facts, self.speeds, self.asked = facts, dict(speeds), 0

    def reference_facts(self, compile=False):
        self.asked += 1
        return dict(self.facts)

    def evaluate(self, source, name):
        from loopwise.kernels.evaluate.result import Evaluation, Reason, Status

        speed = self.speeds.get(source.splitlines()[0])
        if speed is None:
            return Evaluation(status=Status.WRONG_OUTPUT, problem="p", candidate=name, candidate_key=name,
                              reasons=[Reason(code="wrong_output", message="12 of 4096 elements differ")])
        return Evaluation(status=Status.CORRECT, problem="p", candidate=name, candidate_key=name, speedup=speed)


class Script:
    """A proposer that records its requests and answers with the next sources of a script."""

    def __init__(self, sources):
        self.sources, self.requests = list(sources), []

    def propose(self, request):
        self.requests.append(request)
        return [Proposal(content=self.sources.pop(0), note=f"move {len(self.requests)}.{i}", origin="script")
                for i in range(request.n)]


def _run(tmp_path, judge, sources, **settings):
    from loopwise.config import load_config
    from loopwise.kernels.optimize import OptimizeRun, Settings
    from loopwise.kernels.problem import load_problem

    fields = dict(problem=str(PROBLEM), proposer="exchange", exchange_dir=str(tmp_path / "x"), budget=3,
                  per_step=3, profiling="none", search="greedy", repairs=0)
    fields.update(settings)
    run = OptimizeRun.start(Settings(**fields), load_config(None, []), str(tmp_path / "runs"), judge,
                            load_problem(str(PROBLEM)))
    run.proposer = script = Script(sources)
    return run, script


def _variant(tag: str) -> str:
    return f"# {tag}\n" + GOOD


def test_the_first_prompt_states_the_device_its_ceilings_and_the_reference_times(tmp_path):
    run, script = _run(tmp_path, MeasuringJudge(H200), [_variant(t) for t in "abc"])
    run.run()
    user = render_prompt(script.requests[0]).user
    for needle in ("Device: NVIDIA H200.", "copy bandwidth 4300 GB/s", "fp32 GEMM 50.2 TFLOP/s",
                   "TF32 GEMM 372.6 TFLOP/s", "bf16 GEMM 790.0 TFLOP/s", "Eager PyTorch reference: median 1.2500 ms",
                   "torch.compile of the reference: median 0.9000 ms", "Speed-of-light floor: 0.3100 ms (memory-bound)"):
        assert needle in user, needle
    run_id = run.store.meta.run_id
    run.store.close()
    from loopwise.config import load_config
    from loopwise.kernels.optimize import OptimizeRun
    from loopwise.kernels.problem import load_problem

    again_judge = MeasuringJudge(H200)
    again = OptimizeRun.resume(run_id, load_config(None, []), str(tmp_path / "runs"), lambda p: again_judge,
                               load_problem)
    assert again.reference == run.reference and again.summary()["reference"]["compile_ms"] == 0.9
    again.run()
    assert again_judge.asked == 0  # measured once, read back on resume
    again.store.close()


def test_what_was_not_measured_is_stated_as_unknown_with_its_reason(tmp_path):
    from loopwise.kernels.evaluate.reference_facts import unknown

    facts = {**unknown("cpu", ""), "eager_ms": 3.5, "statistic": "median",
             "notes": ["torch.compile time not measured on the CPU",
                       "device ceilings not measured (RuntimeError: no GPU)"]}
    run, script = _run(tmp_path, MeasuringJudge(facts), [_variant(t) for t in "abc"])
    run.run()
    user = render_prompt(script.requests[0]).user
    assert "Eager PyTorch reference: median 3.5000 ms." in user
    assert "torch.compile of the reference: unknown (torch.compile time not measured on the CPU)." in user
    assert "Measured ceilings: unknown (device ceilings not measured (RuntimeError: no GPU))." in user
    assert "Speed-of-light floor: unknown (not measured)." in user
    run.store.close()


def test_the_requests_of_a_step_ask_for_distinct_approaches(tmp_path):
    run, script = _run(tmp_path, MeasuringJudge(H200), [_variant(t) for t in "abc"])
    run.run()
    request = script.requests[0]
    assert request.n == 3 and len(set(request.directions)) == 3
    users = [render_prompt(request, i).user for i in range(3)]
    assert len(set(users)) == 3
    assert all(f"Your approach: {d}." in u for d, u in zip(request.directions, users))


def test_moves_the_findings_suggest_come_first_among_the_directions():
    from loopwise.kernels.optimize.context import default_directions, directions_for

    findings = (FindingNote(text="memory-bound", evidence={"moves": "vectorize_loads; block=512"}),)
    got = directions_for(findings, 4)
    assert got[0].startswith("vectorize_loads (") and got[1] == "block=512" and got[2:] == default_directions()[:2]
    assert directions_for(findings, 1) == ()


def test_siblings_show_their_notes_speedups_and_code_and_the_best_code_is_shown(tmp_path):
    from loopwise.kernels.optimize.context import improve_request

    speeds = {"# slow": 1.2, "# fast": 2.5}
    run, script = _run(tmp_path, MeasuringJudge(H200, speeds), [_variant("slow"), _variant("fast"), _variant("bad")])
    run.run()
    request, cut = improve_request(run, 0)
    assert cut == []
    assert [s.label for s in request.siblings] == ["node 3", "node 2", "node 1"]  # newest first
    by_label = {s.label: s for s in request.siblings}
    assert "move 1.0: correct, 1.200x over eager" in by_label["node 1"].summary and "# slow" in by_label["node 1"].code
    assert "wrong_output (wrong_output)" in by_label["node 3"].summary and by_label["node 3"].code == ""
    assert request.best.label == "node 2" and "2.500x" in request.best.summary and "# fast" in request.best.code
    user = render_prompt(request).user
    assert "## Best so far: node 2" in user and "- node 1: move 1.0: correct, 1.200x over eager" in user
    assert by_label["node 2"].code == "" and user.count("# fast") == 1  # a sibling that is the best: its code once
    best_request, _ = improve_request(run, 2)
    assert best_request.best is None  # the parent is the best: its code is shown once, as the candidate
    run.store.close()


@pytest.mark.slow
def test_a_prompt_with_huge_context_is_cut_to_its_budget_least_useful_first():
    from loopwise.kernels.optimize.context import PROMPT_BUDGET, fit, size
    from loopwise.kernels.optimize.prompt import rules, target

    big = "x = 1  # filler line of a long kernel\n" * 3000
    request = ProposalRequest(
        kind="kernels", task=PROBLEM.read_text(), candidate=GOOD, rules=rules("fp32", 1e-4, 1e-4),
        target=target(H200, {}), n=3, directions=("a", "b", "c"),
        memory="Tried 900 proposals.\n" + "\n".join(f"Failed with crash: note {i}." for i in range(3000)),
        findings=tuple(FindingNote(text=f"finding {i}: " + "y" * 200) for i in range(400)),
        best=Attempt(label="node 9", summary="best: correct, 3.000x over eager", code=big),
        siblings=tuple(Attempt(label=f"node {i}", summary=f"try {i}: correct, 1.{i}x", code=big) for i in range(6)))
    assert size(request) > 5 * PROMPT_BUDGET
    fitted, cut = fit(request)
    assert size(fitted) <= PROMPT_BUDGET
    assert cut[:6] == [f"code of node {i}" for i in range(5, -1, -1)]  # the oldest sibling's code first
    assert fitted.task == request.task and fitted.candidate == GOOD and fitted.rules == request.rules
    assert fitted.target == request.target and fitted.directions == request.directions
    tight, cut = fit(ProposalRequest(kind="kernels", task="T", candidate=big), budget=20_000)
    assert size(tight) <= 20_000 and cut[-1] == "part of the candidate's code" and "lines trimmed" in tight.candidate


def test_every_request_and_every_candidate_is_recorded_with_its_proposer_role_and_version(tmp_path):
    run, script = _run(tmp_path, MeasuringJudge(H200, {"# a": 1.1, "# b": 1.3}), [_variant(t) for t in "abc"])
    run.run()
    events = list(run.store.events())
    [request] = [e.payload for e in events if e.kind == "request"]
    assert request["prompt_version"] == prompt_version("kernels") and request["role"] == "improve"
    assert request["proposer"] == "exchange" and request["n"] == 3 and len(request["directions"]) == 3
    assert [e.payload["by"] for e in events if e.kind == "proposal"] == ["exchange/improve"] * 3
    assert run.summary()["proposals"]["by"] == {"exchange/improve": 3}
    from loopwise.kernels.report.optimize_html import build_report

    html = build_report(run.store).read_text()
    assert "exchange/improve" in html and prompt_version("kernels") in html
    run.store.close()


def test_a_slow_devices_ceilings_are_stated_in_figures_not_as_zero():
    from loopwise.kernels.optimize.prompt import target

    cpu = {"device": "cpu", "bandwidth_gbs": 9.9, "fp32_tflops": 0.023, "tf32_tflops": 0.029, "bf16_tflops": 0.136}
    stated = target(cpu, {})
    assert "fp32 GEMM 0.023 TFLOP/s, TF32 GEMM 0.029 TFLOP/s, bf16 GEMM 0.14 TFLOP/s" in stated, stated
    assert "fp32 GEMM 50.2 TFLOP/s" in target(H200, {})


def test_the_search_memory_counts_a_models_answers_by_the_approach_asked_not_by_their_free_notes(tmp_path):
    """A model's notes are free text, one of a kind: grouped by them, the memory could never say
    what kind of change worked or never did. Its answers are counted under the approach each
    request asked for, and the free note stays with the node (and resume rebuilds the same)."""
    tags = "abcdef"
    run, script = _run(tmp_path, MeasuringJudge(H200, {f"# {t}": 0.9 for t in tags}),
                       [_variant(t) for t in tags], budget=6)
    run.run()
    asked = [d for request in script.requests for d in request.directions]
    assert len(script.requests) == 2 and set(asked) == set(script.requests[0].directions)
    notes = run.search.memory.notes()
    assert set(notes) == set(asked) and all(r.tried == 2 and not r.improved for r in notes.values())
    assert "Correct but never faster: " in run.search.memory.summary()
    assert run.search.node(1).note == "move 1.0"
    run_id = run.store.meta.run_id
    run.store.close()
    from loopwise.config import load_config
    from loopwise.kernels.optimize import OptimizeRun
    from loopwise.kernels.problem import load_problem

    again = OptimizeRun.resume(run_id, load_config(None, []), str(tmp_path / "runs"),
                               lambda problem: MeasuringJudge(H200), load_problem)
    assert again.search.memory == run.search.memory
    again.store.close()


def test_a_models_repair_is_counted_as_a_repair():
    from loopwise.kernels.optimize.loop import OptimizeRun

    request = ProposalRequest(task="t", n=2, directions=("fuse", "tile"))
    assert [OptimizeRun._move(request, i, False, "llm") for i in range(2)] == ["fuse", "tile"]
    assert OptimizeRun._move(request, 1, True, "llm") == "repair"
    assert OptimizeRun._move(request, 0, False, "expert") == ""


class Silent:
    """A proposer whose agent is gone: every request times out; ``answer_at`` lists the calls
    (1-based) that get a correct answer instead."""

    def __init__(self, answer_at=()):
        self.calls, self.answer_at = 0, set(answer_at)

    def propose(self, request):
        from loopwise.core.propose import FailureReason, ProposalFailure

        self.calls += 1
        if self.calls in self.answer_at:
            return [Proposal(content=_variant(f"answer {self.calls}.{i}"), note="n", origin="s") for i in range(request.n)]
        return [ProposalFailure(reason=FailureReason.TIMEOUT, detail="no answer within 30 s", origin="s")] * request.n


def test_a_model_that_stops_answering_stops_the_run_after_two_silent_steps_not_one_wait_per_node(tmp_path):
    from loopwise.kernels.optimize.loop import SILENT_STEPS

    speeds = {f"# answer 1.{i}": 1.1 + i / 10 for i in range(3)}
    run, _ = _run(tmp_path, MeasuringJudge(H200, speeds), [], budget=12, per_step=3)
    run.proposer = silent = Silent(answer_at={1})
    assert run.run() is True and run.tally.evaluations == 3  # three open nodes left, one wait each without the rule
    assert SILENT_STEPS == 2 and silent.calls == 1 + SILENT_STEPS
    assert run.stopped.startswith("the model answered none of the requests of the last 2 steps")
    assert "no answer within 30 s" in run.stopped and f"--resume {run.store.meta.run_id}" in run.stopped
    assert [e.payload["reason"] for e in run.store.events() if e.kind == "stopped"] == [run.stopped]
    run_id = run.store.meta.run_id
    run.store.close()
    from loopwise.config import load_config
    from loopwise.kernels.optimize import OptimizeRun
    from loopwise.kernels.problem import load_problem

    speeds |= {f"# answer 11.{i}": 2.0 for i in range(3)}
    again = OptimizeRun.resume(run_id, load_config(None, []), str(tmp_path / "runs"),
                               lambda problem: MeasuringJudge(H200, speeds), load_problem)
    again.proposer = back = Silent(answer_at={11})  # the agent is back, with new answers
    back.calls = 10
    again.run()
    assert again.tally.evaluations == 6  # three new candidates judged after the resume (then silent again)
    again.store.close()


def test_an_answer_between_silent_steps_keeps_the_run_going(tmp_path):
    speeds = {f"# answer {c}.{i}": 1.1 + c + i / 10 for c in (1, 3) for i in range(3)}
    run, _ = _run(tmp_path, MeasuringJudge(H200, speeds), [], budget=12, per_step=3)
    run.proposer = silent = Silent(answer_at={1, 3})
    run.run()
    assert silent.calls == 5 and run.tally.evaluations == 6  # answered, silent, answered, silent, silent
    run.store.close()
