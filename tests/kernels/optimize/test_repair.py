"""A model in the loop that learns from its mistakes: a scripted exchange agent makes the typical
ones (a typo, a plain fp32 ``tl.dot``, no code block, a duplicate), and a scripted model behind a
local OpenAI-compatible server the same and a wrong index; the loop repairs each within two turns,
telling the model exactly what went wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench_modules import bench_module
from exchange_agent import ScriptedAgent
from judge_doubles import StandInJudge

PROBLEM = Path(__file__).parents[3] / "loopwise" / "kernels" / "examples" / "scaled_gelu_problem.py"
GOOD = (PROBLEM.parent / "scaled_gelu_triton.py").read_text()
TYPO = GOOD.replace("tl.arange(0, BLOCK)", "tl.arang(0, BLOCK)")
OTHER = GOOD.replace("1024", "512")
REPLAY = bench_module("repair_replay")  # the mistakes bench/repair_replay.py replays, written once there
DOT = GOOD + REPLAY.DOT  # a plain fp32 tl.dot
answer = REPLAY.answer


@pytest.mark.slow  # four candidates judged in Triton's interpreter through a whole command: about 40 s
def test_the_loop_repairs_a_typo_a_plain_dot_no_code_and_a_duplicate(tmp_path, cli_env):
    exchange = tmp_path / "exchange"
    answers = [answer(TYPO, "fused kernel"),               # 1: improve the reference -> crash
               answer(GOOD, "fix the arange typo"),        # 2: repair of node 1 -> correct
               "I would fuse the bias into the GELU.",     # 3: improve -> no code block
               answer(GOOD, "fused kernel again"),         # 4: re-prompt -> a duplicate of node 2
               answer(DOT, "fused kernel with a dot"),     # 5: re-prompt -> rejected by the static check
               answer(OTHER, "ieee dot removed, 512")]     # 6: repair of node 3 -> correct
    cmd = [sys.executable, "-m", "loopwise", "kernels", "optimize", str(PROBLEM), "--proposer", "exchange",
           "--exchange-dir", str(exchange), "--exchange-timeout", "120", "--budget", "4", "--per-step", "1",
           "--device", "cpu", "--runs-dir", str(tmp_path / "runs"), "--set", "kernels.eval.perf_trials=3", "--json"]
    with ScriptedAgent(exchange, answers) as agent:
        out = subprocess.run(cmd, capture_output=True, text=True, env=cli_env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    prompts = agent.prompts
    assert len(prompts) == 6, [p[-300:] for p in prompts]
    assert "no attribute 'arang'" in prompts[1] and "## The candidate that failed" in prompts[1]
    assert "Your previous answer could not be used: no ```python block" in prompts[3]
    assert "identical to node 2" in prompts[4]
    assert "`tl.dot` without input_precision" in prompts[5] and "## The candidate that failed" in prompts[5]
    assert "Precision policy fp32" in prompts[0] and "class ModelNew" in prompts[0]  # the rules, from the start
    assert summary["evaluations"] == 4 and summary["stopped"] == ""
    assert summary["proposals"]["duplicates"] == 1 and summary["proposals"]["repairs"] == 2
    assert summary["proposals"]["reprompts"] == 2 and summary["proposals"]["failed"] == {"no_code": 1}
    assert summary["failures"] == {"crash": 1, "exploit": 1}, summary["failures"]


class _Silent:
    """A proposer whose every answer has no code block: the search must say why it judged nothing."""

    def __init__(self):
        self.requests = []

    def propose(self, request):
        from loopwise.core.propose import FailureReason, ProposalFailure

        self.requests.append(request)
        return [ProposalFailure(reason=FailureReason.NO_CODE, detail="no ```python block in the reply",
                                origin="script")] * request.n


def test_a_search_whose_every_answer_fails_to_parse_re_prompts_then_says_why_it_stopped(tmp_path):
    from loopwise.config import load_config
    from loopwise.kernels.optimize import REPROMPT_ROUNDS, OptimizeRun, Settings
    from loopwise.kernels.problem import load_problem

    class NoJudge(StandInJudge):
        def evaluate(self, source, name):
            raise AssertionError("nothing should be judged")

    settings = Settings(problem=str(PROBLEM), proposer="exchange", exchange_dir=str(tmp_path / "x"), budget=4,
                        per_step=2, profiling="none")
    run = OptimizeRun.start(settings, load_config(None, []), str(tmp_path / "runs"), NoJudge(),
                            load_problem(str(PROBLEM)))
    run.proposer = silent = _Silent()
    assert run.run() is True
    assert run.tally.evaluations == 0 and run.tally.reprompts == 2 * REPROMPT_ROUNDS
    assert [r.feedback for r in silent.requests[1:]] == ["no ```python block in the reply"] * (2 * REPROMPT_ROUNDS)
    summary = run.summary()
    assert summary["stopped"].startswith("no candidate was judged: all 6 proposals failed (no_code: no ```python")
    assert "\n" not in summary["stopped"]
    run.store.close()


def test_the_expert_declines_a_repair_and_is_never_asked_for_one():
    from loopwise.core.propose import ProposalRequest, ProposalRole
    from loopwise.kernels.expert.proposer import ExpertProposer
    from loopwise.kernels.optimize import Settings, make_search
    from loopwise.kernels.problem import load_problem

    expert = ExpertProposer(load_problem(str(PROBLEM)))
    [result] = expert.propose(ProposalRequest(task="t", candidate=TYPO, role=ProposalRole.REPAIR))
    assert not result.ok and "declines repair" in result.detail
    assert make_search(Settings(problem="p")).repairs == 0
    assert make_search(Settings(problem="p", proposer="exchange", exchange_dir="x")).repairs == 1


class _Repeating:
    """Answers every request with the next code of a script."""

    def __init__(self, codes):
        self.codes, self.requests = list(codes), []

    def propose(self, request):
        from loopwise.core.propose import Proposal

        self.requests.append(request)
        return [Proposal(content=self.codes.pop(0), note="same again", origin="script") for _ in range(request.n)]


class _AlwaysCorrect(StandInJudge):
    def evaluate(self, source, name):
        from loopwise.kernels.evaluate.result import Evaluation, Status

        return Evaluation(status=Status.CORRECT, problem="p", candidate=name, candidate_key=source[-8:],
                          speedup=1.0 + len(source) / 1e4)


def test_a_duplicate_answer_is_recorded_counted_re_prompted_and_replayed(tmp_path):
    from loopwise.config import load_config
    from loopwise.kernels.optimize import OptimizeRun, Settings
    from loopwise.kernels.problem import load_problem

    cfg, runs = load_config(None, []), str(tmp_path / "runs")
    settings = Settings(problem=str(PROBLEM), proposer="exchange", exchange_dir=str(tmp_path / "x"), budget=2,
                        per_step=1, profiling="none", search="greedy")
    run = OptimizeRun.start(settings, cfg, runs, _AlwaysCorrect(), load_problem(str(PROBLEM)))
    run.proposer = script = _Repeating([GOOD, GOOD, OTHER])
    assert run.run() is True and run.tally.evaluations == 2
    assert "identical to node 1" in script.requests[2].feedback
    assert run.summary()["proposals"]["duplicates"] == 1 and "(1 duplicates)" in run.search.memory.summary()
    run_id = run.store.meta.run_id
    run.store.close()
    again = OptimizeRun.resume(run_id, cfg, runs, lambda problem: _AlwaysCorrect(), load_problem)
    assert again.tally.duplicates == 1 and again.tally.reprompts == 1
    assert again.search.memory.summary() == run.search.memory.summary()
    again.store.close()


@pytest.mark.slow  # six candidates judged in Triton's interpreter: about 30 s on the loaded 2-core CPU
def test_a_model_over_the_openai_wire_is_repaired_after_each_typical_mistake(tmp_path, cli_env):
    """The same loop with a scripted model behind a local OpenAI-compatible server making all five
    typical mistakes (a typo, no code block, a duplicate, a plain fp32 ``tl.dot``, a wrong index):
    each is answered, within two turns, by the request that names it (the crash's log, the parse
    error, the duplicate's node, the rule broken, the mismatch), and the repairs are counted."""
    from fake_llm_server import FakeLLMServer, good, no_code

    wrong_index = GOOD.replace("x_ptr + offs,", "x_ptr + (offs ^ 1),")
    again = GOOD.replace("1024", "2048")
    assert len({wrong_index, again, GOOD, OTHER}) == 4
    server = FakeLLMServer().start()
    try:
        server.queue(good(TYPO, "Move: fused kernel"),                 # improve the reference -> crash
                     good(GOOD, "Move: fix the arange typo"),          # its repair -> correct
                     no_code(),                                        # improve -> no code block
                     good(GOOD, "Move: fused kernel again"),           # re-prompt -> a duplicate
                     good(DOT, "Move: fused kernel with a dot"),       # re-prompt -> exploit (plain fp32 dot)
                     good(OTHER, "Move: ieee dot removed, 512"),       # its repair -> correct
                     good(wrong_index, "Move: new indexing"),          # improve -> wrong output
                     good(again, "Move: indexing fixed, 2048"))        # its repair -> correct
        cmd = [sys.executable, "-m", "loopwise", "kernels", "optimize", str(PROBLEM), "--proposer", "llm",
               "--llm-model", "m", "--llm-base-url", server.base_url + "/v1", "--budget", "6", "--per-step", "1",
               "--device", "cpu", "--runs-dir", str(tmp_path / "runs"), "--set", "kernels.eval.perf_trials=3",
               "--set", "llm.tools=false", "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, env=cli_env, timeout=900)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    users = [post.body["messages"][1]["content"] for post in server.posts()]
    assert len(users) == 8, [u[-300:] for u in users]
    assert "## The candidate that failed" in users[1] and "no attribute 'arang'" in users[1]
    assert "Your previous answer could not be used: no ```python block" in users[3]
    assert "identical to node 2" in users[4]
    assert "`tl.dot` without input_precision" in users[5] and "## The candidate that failed" in users[5]
    assert "## The candidate that failed" in users[7] and "wrong_output" in users[7] and "max_abs_err" in users[7]
    assert summary["evaluations"] == 6 and summary["proposals"]["repairs"] == 3
    assert summary["proposals"]["duplicates"] == 1 and summary["proposals"]["reprompts"] == 2
    assert summary["failures"] == {"crash": 1, "exploit": 1, "wrong_output": 1}, summary["failures"]
    assert summary["proposals"]["by"] == {"llm/improve": 2, "llm/repair": 3, "llm/improve re-prompt": 1}
