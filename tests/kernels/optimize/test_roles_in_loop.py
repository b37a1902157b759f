"""The model's roles in the kernels loop: the analyst's plan steers the coder and is recorded, the
reviewer explains every suspicious verdict (recorded, in the summary and the report), each role may
be another model; a hybrid run puts the expert's and the model's candidates in one tree, the model
starting from the expert's best."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from judge_doubles import StandInJudge

from loopwise.core.propose import FailureReason, Proposal, ProposalFailure, ProposalRole

HERE = Path(__file__).parents[1]
CHAIN = HERE / "expert_problems" / "chain.py"
GELU = Path(__file__).parents[3] / "loopwise" / "kernels" / "examples" / "scaled_gelu_problem.py"
PLAN = {"move": "fuse the chain into one pass", "rationale": "three launches for a memory-bound chain"}
REVIEW = {"verdict": "exploit", "explanation": "forward returns before the background thread wrote y"}


def _code(tag: str) -> str:
    return f"import torch\n\n\nclass ModelNew(torch.nn.Module):  # {tag}\n    pass\n"


class _Team:
    """A scripted model playing every role: a plan, a code per coder request, a review."""

    def __init__(self, plan=PLAN, analyst_fails=False):
        self.requests, self.plan, self.analyst_fails, self.count = [], plan, analyst_fails, 0

    def propose(self, request):
        self.requests.append(request)
        if request.role is ProposalRole.ANALYST:
            if self.analyst_fails:
                return [ProposalFailure(reason=FailureReason.NO_CODE, origin="script",
                                        detail="the scripted agent declines analyst requests")]
            return [Proposal(content=json.dumps(self.plan), origin="script")]
        if request.role is ProposalRole.REVIEW:
            return [Proposal(content=json.dumps(REVIEW), origin="script")]
        out = []
        for _ in range(request.n):
            self.count += 1
            out.append(Proposal(content=_code(f"cheat {self.count}" if self.count == 1 else f"model {self.count}"),
                                note=f"move {self.count}", origin="script"))
        return out


class _Judge(StandInJudge):
    """A cheat is an exploit, everything else correct; faster the longer its source."""

    def evaluate(self, source, name):
        from loopwise.kernels.evaluate.result import Evaluation, Reason, Status

        if "cheat" in source:
            return Evaluation(status=Status.EXPLOIT, problem="p", candidate=name, candidate_key=source[-12:],
                              reasons=[Reason(code="thread_injection", message="a thread was left running")])
        return Evaluation(status=Status.CORRECT, problem="p", candidate=name, candidate_key=source[-12:],
                          speedup=1.0 + len(source) / 1e4)


def _run(tmp_path, problem=CHAIN, **settings):
    from loopwise.config import load_config
    from loopwise.kernels.optimize import OptimizeRun, Settings
    from loopwise.kernels.problem import load_problem

    base = dict(problem=str(problem), proposer="exchange", exchange_dir=str(tmp_path / "x"), budget=3,
                per_step=1, profiling="none", search="greedy")
    cfg, runs = load_config(None, []), str(tmp_path / "runs")
    return OptimizeRun.start(Settings(**{**base, **settings}), cfg, runs, _Judge(), load_problem(str(problem))), cfg


def _events(run, kind):
    return [e.payload for e in run.store.events() if e.kind == kind]


def test_the_analysts_plan_steers_the_coder_and_the_reviewer_explains_the_exploit(tmp_path):
    run, _ = _run(tmp_path, roles=["analyst", "reviewer"], budget=2)
    run.proposer = team = _Team()
    assert run.run() is True
    roles = [r.role for r in team.requests]
    # analyst, coder (a cheat), reviewer of the cheat, then a repair of it (no analyst for a repair)
    assert roles == [ProposalRole.ANALYST, ProposalRole.IMPROVE, ProposalRole.REVIEW, ProposalRole.REPAIR], roles
    coder = team.requests[1]
    assert coder.plan.startswith("Move: fuse the chain into one pass\nWhy: three launches")
    [analysis] = _events(run, "analysis")
    assert analysis["move"] == PLAN["move"] and analysis["by"] == "exchange/analyst"
    review = team.requests[2]
    assert "thread_injection" in " ".join(f.text for f in review.findings) and "cheat 1" in review.candidate
    summary = run.summary()
    assert summary["reviews"] == {"1": {"verdict": "exploit", "explanation": REVIEW["explanation"],
                                        "by": "exchange/reviewer"}}
    from rich.console import Console

    from loopwise.kernels.optimize.console import _print_summary
    from loopwise.kernels.report.optimize_html import build_report

    terminal = Console(record=True, width=200)
    _print_summary(terminal, run, None)
    assert f"reviewer on node 1: exploit: {REVIEW['explanation']}" in terminal.export_text()

    html = build_report(run.store).read_text()
    assert REVIEW["explanation"] in html and ("analyst&#39;s plan" in html or "analyst's plan" in html)
    run.store.close()


class _CudaJudge(_Judge):
    device = device_name = "cuda:0"


def test_the_tools_the_analyst_picks_are_run_on_the_profile_of_the_result(tmp_path):
    """The analyst is shown the installed profiling tools; those it names (an unknown one is
    dropped and recorded) run on its step's candidate when that is profiled, besides the ones its
    roofline class selects."""
    from loopwise.config import load_config
    from loopwise.kernels.optimize import OptimizeRun, Settings
    from loopwise.kernels.problem import load_problem
    from loopwise.kernels.profile.run import ProfileReport

    settings = Settings(problem=str(GELU), proposer="exchange", exchange_dir=str(tmp_path / "x"), budget=2,
                        per_step=1, search="greedy", roles=["analyst"], profile_within=0)
    run = OptimizeRun.start(settings, load_config(None, []), str(tmp_path / "runs"), _CudaJudge(),
                            load_problem(str(GELU)))
    run.proposer = team = _Team(plan={**PLAN, "tools": ["tail_effect", "no_such_tool"]})
    team.count = 1
    calls = []

    def profiler(problem, candidate, out_dir, **kw):
        calls.append((candidate is not None, kw.get("also", ())))
        return ProfileReport(problem="p", candidate="c", device="cuda:0", mode=kw["mode"], kernels=[], findings=[],
                             costs_s={}, notes=[], artifacts={})

    run.profiler = profiler
    assert run.run() is True
    analyst = team.requests[0]
    assert analyst.role is ProposalRole.ANALYST and "- tail_effect: " in analyst.snippets[0].code
    analyses = _events(run, "analysis")
    assert analyses[0]["tools"] == ["tail_effect"] and analyses[0]["unknown_tools"] == ["no_such_tool"]
    assert "Tools it wants run: tail_effect" in team.requests[1].plan
    assert calls == [(False, ()), (True, ("tail_effect",))]  # the reference, then node 1 with the pick
    assert [e.get("also") for e in _events(run, "profile")] == [None, ["tail_effect"]]
    run.store.close()


def test_an_analyst_that_gives_no_plan_is_recorded_and_the_coder_goes_on(tmp_path):
    run, _ = _run(tmp_path, roles=["analyst"], budget=1)
    run.proposer = team = _Team(analyst_fails=True)
    assert run.run() is True and run.tally.evaluations == 1
    [failed] = _events(run, "analysis_failed")
    assert failed["reason"] == "no_code" and "declines analyst" in failed["detail"]
    assert team.requests[1].role is ProposalRole.IMPROVE and team.requests[1].plan == ""
    run.store.close()


def test_a_hybrid_run_starts_the_model_from_the_experts_best_in_one_tree(tmp_path):
    run, cfg = _run(tmp_path, proposer="hybrid", hybrid_expert_steps=1, per_step=2, budget=4, search="mcts")
    run.proposer = team = _Team(plan=PLAN)
    team.count = 1  # no cheat: every model candidate is correct
    assert run.run() is True and run.tally.evaluations == 4
    experts = [n for n, by in run.made_by.items() if by == "expert/improve"]
    models = [n for n, by in run.made_by.items() if by == "exchange/improve"]
    assert len(experts) == 2 and len(models) == 2
    [handover] = _events(run, "handover")
    best_expert = max(experts, key=lambda n: run.evaluations[n]["speedup"])
    assert handover["node"] == best_expert
    first = team.requests[0]
    assert first.candidate == run.sources[best_expert]  # the model starts from the expert's code
    assert {run.search.node(n).parent_id for n in models} == {best_expert}
    assert [r["proposer"] for r in _events(run, "request")] == ["expert", "exchange"]
    run_id = run.store.meta.run_id
    run.store.close()
    from loopwise.kernels.optimize import OptimizeRun
    from loopwise.kernels.problem import load_problem

    again = OptimizeRun.resume(run_id, cfg, str(tmp_path / "runs"), lambda problem: _Judge(), load_problem)
    assert again.expert_steps == 1 and again.handed_over and again.made_by == run.made_by
    again.store.close()


@pytest.mark.parametrize("args, message", [
    (["--llm-role-model", "planner=m"], "error: --llm-role-model 'planner=m': unknown role 'planner'"),
    (["--llm-role-model", "reviewer=m"], "the reviewer is off; add --roles reviewer"),
    (["--roles", "critic"], "error: --roles 'critic': 'critic' is not a role that can be switched on"),
    (["--proposer", "hybrid"], "error: --proposer hybrid needs a model: --llm-model (a server) or --exchange-dir"),
    (["--roles", "analyst"], "the expert proposer plays no analyst or reviewer"),
])
def test_bad_role_options_are_one_line(tmp_path, args, message):
    out = subprocess.run([sys.executable, "-m", "loopwise", "kernels", "optimize", str(CHAIN), *args, "--device",
                          "cpu", "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and message in lines[0], out.stderr[-2000:]


@pytest.mark.slow
def test_each_role_is_its_own_model_over_the_wire_and_the_review_reaches_the_report(tmp_path, cli_env):
    """Per-role models against a local OpenAI-compatible server, judged for real on the CPU: the
    analyst, the coder and the reviewer are three models; the cheat is rejected and explained."""
    from fake_llm_server import FakeLLMServer, Scripted, good

    cheat = (GELU.parent / "scaled_gelu_cheat.py").read_text()
    fixed = (GELU.parent / "scaled_gelu_triton.py").read_text()
    server = FakeLLMServer().start()
    try:
        server.queue(Scripted(text=f"```json\n{json.dumps(PLAN)}\n```"), good(cheat, "Move: a thread"),
                     Scripted(text=f"```json\n{json.dumps(REVIEW)}\n```"), good(fixed, "Move: no thread"))
        cmd = [sys.executable, "-m", "loopwise", "kernels", "optimize", str(GELU), "--proposer", "llm",
               "--llm-model", "coder-m", "--llm-base-url", server.base_url + "/v1", "--roles", "analyst,reviewer",
               "--llm-role-model", "analyst=analyst-m", "--llm-role-model", "reviewer=reviewer-m",
               "--budget", "2", "--per-step", "1", "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
               "--set", "kernels.eval.perf_trials=3", "--set", "llm.tools=false", "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, env=cli_env, timeout=600)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert [p.body["model"] for p in server.posts()] == ["analyst-m", "coder-m", "reviewer-m", "coder-m"]
    assert "## The analyst's plan for this step" in server.posts()[1].body["messages"][1]["content"]
    assert summary["reviews"]["1"]["verdict"] == "exploit" and summary["best"]["status"] == "correct"
    db = sqlite3.connect(tmp_path / "runs" / summary["run_id"] / "run.sqlite")
    kinds = [row[0] for row in db.execute("SELECT kind FROM events WHERE kind IN ('analysis', 'review')")]
    db.close()
    assert kinds == ["analysis", "review"]
    report = subprocess.run([sys.executable, "-m", "loopwise", "report", summary["run_id"], "--runs-dir",
                             str(tmp_path / "runs")], capture_output=True, text=True, env=cli_env, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    html = (tmp_path / "runs" / summary["run_id"] / "report.html").read_text()
    assert "background thread wrote y" in html


@pytest.mark.slow
def test_a_hybrid_run_over_the_wire_hands_the_experts_best_to_the_model(tmp_path, cli_env):
    """--proposer hybrid on the CPU with a local OpenAI-compatible server: the expert's candidate
    first, then the model's, asked to improve the expert's code, both in one tree."""
    from fake_llm_server import FakeLLMServer, good

    fixed = (GELU.parent / "scaled_gelu_triton.py").read_text().replace("1024", "512")
    server = FakeLLMServer().start()
    try:
        server.queue(good(fixed, "Move: smaller blocks"))
        cmd = [sys.executable, "-m", "loopwise", "kernels", "optimize", str(GELU), "--proposer", "hybrid",
               "--llm-model", "m", "--llm-base-url", server.base_url + "/v1", "--hybrid-expert-steps", "1",
               "--budget", "2", "--per-step", "1", "--search", "greedy", "--device", "cpu",
               "--runs-dir", str(tmp_path / "runs"), "--set", "kernels.eval.perf_trials=3",
               "--set", "llm.tools=false", "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, env=cli_env, timeout=600)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["proposals"]["by"] == {"expert/improve": 1, "llm/improve": 1}, summary["proposals"]
    [post] = server.posts()
    user = post.body["messages"][1]["content"]
    assert "## Current candidate" in user and "4 warps" in user  # the expert's file (block 1024, 4 warps)
    db = sqlite3.connect(tmp_path / "runs" / summary["run_id"] / "run.sqlite")
    handover = [json.loads(row[0]) for row in db.execute("SELECT payload FROM events WHERE kind = 'handover'")]
    db.close()
    assert [h["node"] for h in handover] == [1]  # the expert's candidate, whatever the search asked for
