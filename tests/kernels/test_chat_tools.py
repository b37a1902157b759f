"""The kernels engine's chat tools: the static check a model may call on its draft and the profile
of a draft against the run's problem, offered beside the code search, made for the run (its policy,
problem, device and folder) and answering through the same call path as every tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopwise.core.propose.llm._tools import (
    ToolCall,
    ToolContext,
    anthropic_spec,
    engine_tools,
    openai_spec,
    run_tool_call,
)

CANDIDATES = Path(__file__).parent / "candidates"


def _call(tools, source: str, **extra) -> str:
    result = run_tool_call({t.name: t for t in tools}, ToolCall("c1", "check_candidate",
                                                                json.dumps({"source": source, **extra})))
    assert not result.is_error, result.content
    return result.content


def test_the_static_check_is_offered_and_judges_a_draft_as_the_judge_scans_it():
    tools = engine_tools(ToolContext(kind="kernels"))
    assert "check_candidate" in [t.name for t in tools]
    check = next(t for t in tools if t.name == "check_candidate")
    assert openai_spec(check)["function"]["parameters"]["required"] == ["source"]
    assert anthropic_spec(check)["input_schema"]["properties"]["policy"]["enum"] == ["fp32", "relaxed"]
    honest = (CANDIDATES / "triton_matmul_ieee.py").read_text()
    assert _call(tools, honest).startswith("clean under the fp32 policy")
    plain_dot = honest.replace('input_precision="ieee"', "").replace("input_precision='ieee'", "")
    assert plain_dot != honest
    verdict = _call(tools, plain_dot)
    assert verdict.startswith("rejected under the fp32 policy") and "precision_downgrade" in verdict and "(line " in verdict
    assert _call(tools, plain_dot, policy="relaxed").startswith("clean under the relaxed policy")
    only_torch = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    assert "rejected" in _call(tools, only_torch)


def test_a_bad_call_is_an_error_the_model_reads():
    tools = {t.name: t for t in engine_tools(ToolContext(kind="kernels"))}
    result = run_tool_call(tools, ToolCall("c2", "check_candidate", json.dumps({"policy": "fp32"})))
    assert result.is_error and "source" in result.content


# -- made for the run: its policy, its problem, its device and folder ---------------------------------

PROBLEMS = CANDIDATES / "problems"
RECORDED = Path(__file__).parent / "profile_fixtures" / "recorded"


def _context(policy: str = "fp32", device: str = "cpu", folder=None, task: str | None = None):
    from loopwise.core.propose.llm import ToolContext
    from loopwise.kernels.optimize.prompt import rules

    return ToolContext(kind="kernels", task=(PROBLEMS / "relu.py").read_text() if task is None else task,
                       rules=rules(policy, 1e-4, 1e-4), device=device, folder=folder)


def _plain_dot() -> str:
    honest = (CANDIDATES / "triton_matmul_ieee.py").read_text()
    return honest.replace('input_precision="ieee"', "").replace("input_precision='ieee'", "")


def test_the_static_check_defaults_to_the_runs_policy():
    from loopwise.kernels.chat_tools import kernel_tools

    assert _call(kernel_tools(_context("relaxed")), _plain_dot()).startswith("clean under the relaxed policy")
    assert _call(kernel_tools(_context("fp32")), _plain_dot()).startswith("rejected under the fp32 policy")
    assert _call(kernel_tools(_context("relaxed")), _plain_dot(), policy="fp32").startswith("rejected")


def test_the_profile_is_offered_only_for_a_run_that_states_its_problem():
    from loopwise.kernels.chat_tools import kernel_tools

    assert "profile_candidate" in [t.name for t in kernel_tools(_context())]
    assert "profile_candidate" not in [t.name for t in kernel_tools(_context(task=""))]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_model_checks_under_the_runs_policy_and_hears_that_profiling_needs_cuda(tmp_path, monkeypatch, api):
    """Through the tool-call path of both APIs: the proposer tells the tools its run (the problem, a
    relaxed policy, a CPU device), so a plain ``tl.dot`` is clean and a profile is one line saying why not."""
    from fake_llm_server import FakeLLMServer, call, good, tool_use

    from loopwise.core.propose import ProposalRequest
    from loopwise.core.propose.llm import LLMConfig, LLMProposer

    monkeypatch.setenv("LOOPWISE_TEST_KEY", "sk-test")
    context = _context("relaxed")
    honest = (CANDIDATES / "triton_relu.py").read_text()
    server = FakeLLMServer().start()
    try:
        server.queue(tool_use(call("check_candidate", {"source": _plain_dot()}),
                              call("profile_candidate", {"source": honest})), good())
        base = server.base_url + ("/v1" if api == "openai" else "")
        config = LLMConfig(api=api, model="fake-model", base_url=base, api_key_env="LOOPWISE_TEST_KEY", max_retries=0)
        proposer = LLMProposer(config, device="cpu", tool_folder=tmp_path / "tools")
        request = ProposalRequest(kind="kernels", task=context.task, rules=context.rules)
        [result] = proposer.propose(request)
        first, second = server.posts()
    finally:
        server.stop()
    assert result.ok
    offered = ([t["function"]["name"] for t in first.body["tools"]] if api == "openai"
               else [t["name"] for t in first.body["tools"]])
    assert {"check_candidate", "profile_candidate"} <= set(offered)
    if api == "openai":
        answers = [m["content"] for m in second.body["messages"] if m["role"] == "tool"]
    else:
        answers = [b["content"] for m in second.body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                   for b in m["content"] if b["type"] == "tool_result"]
    checked, profiled = answers
    assert checked.startswith("clean under the relaxed policy")
    assert profiled.startswith("error: no GPU: profiling needs CUDA") and "cpu" in profiled and "\n" not in profiled


def test_make_proposer_gives_the_tools_the_runs_device_and_folder(tmp_path):
    from loopwise.core.propose import ProposalRequest, make_proposer
    from loopwise.core.run import create_run

    store = create_run(str(tmp_path / "runs"), "kernels.optimize", "{}")
    try:
        proposer = make_proposer("llm", "kernels", store=store, device="cuda:0",
                                 llm={"model": "m", "base_url": "http://127.0.0.1:9/v1"})
        context = proposer.tool_context(ProposalRequest(kind="kernels", task="t", rules=("r",)))
    finally:
        store.close()
    assert (context.device, context.task, context.rules) == ("cuda:0", "t", ("r",))
    assert context.folder is not None and context.folder.parent == store.run_dir


def test_a_profile_runs_the_profile_pipeline_on_the_draft_against_the_runs_problem(tmp_path):
    """The tool hands the profiler what ``loopwise kernels profile`` would get (the run's problem,
    the draft as a file, the run's device and policy) and answers with its guidance, cut to the budget;
    the profiler here reads a profile recorded on an H200 instead of running one."""
    from loopwise.kernels.chat_tools import PROFILE_RESULT_CHARS, ProfileCandidate, kernel_tools
    from loopwise.kernels.profile.guidance import finding_line
    from loopwise.kernels.profile.run import analyze

    seen = {}

    def recorded(problem, candidate, out_dir, **options):
        seen.update(problem=problem, draft=Path(candidate).read_text(), out_dir=out_dir, **options)
        return analyze(RECORDED / "unfused_chain", mode=options["mode"], write=False)

    honest = (CANDIDATES / "triton_relu.py").read_text()
    context = _context("relaxed", device="cuda:0", folder=tmp_path / "tools")
    tool = ProfileCandidate(context, profiler=recorded)
    result = run_tool_call({tool.name: tool}, ToolCall("p1", "profile_candidate", json.dumps({"source": honest})))
    assert not result.is_error, result.content
    assert seen["problem"].source == context.task and seen["draft"] == honest
    assert (seen["device"], seen["precision"], seen["mode"], seen["ncu"]) == ("cuda:0", "relaxed", "proactive", "auto")
    assert Path(seen["out_dir"]).is_relative_to(tmp_path / "tools")
    report = analyze(RECORDED / "unfused_chain", mode="proactive", write=False)
    assert report.findings and finding_line(report.findings[0]) in result.content
    assert "kernels (" in result.content and len(result.content) <= PROFILE_RESULT_CHARS
    from chat_tool_conformance import check_chat_tool

    assert check_chat_tool(tool, {"source": honest}) == result.content
    assert check_chat_tool(kernel_tools(context)[-2], {"source": honest}).startswith("clean under the relaxed policy")


def test_the_profile_guidance_is_cut_to_whole_lines_within_the_budget():
    from loopwise.kernels.profile.guidance import guidance_lines, guidance_text
    from loopwise.kernels.profile.run import analyze

    report = analyze(RECORDED / "unfused_chain", mode="all", write=False)
    whole = guidance_text(report, 100_000)
    assert whole == "\n".join(guidance_lines(report))
    cut = guidance_text(report, 300)
    assert len(cut) <= 300 and cut.splitlines()[-1].endswith("more lines cut to fit 300 characters]")
    assert all(line in whole.splitlines() for line in cut.splitlines()[:-1])


@pytest.mark.gpu
def test_a_profile_on_the_gpu_answers_with_the_kernels_and_the_findings(tmp_path):
    from loopwise.kernels.chat_tools import PROFILE_RESULT_CHARS, kernel_tools

    tools = {t.name: t for t in kernel_tools(_context(device="cuda:0", folder=tmp_path / "tools"))}
    honest = (CANDIDATES / "triton_relu.py").read_text()
    result = run_tool_call(tools, ToolCall("p1", "profile_candidate", json.dumps({"source": honest})))
    assert not result.is_error, result.content
    assert "kernels (" in result.content and "relu" in result.content.lower()
    assert len(result.content) <= PROFILE_RESULT_CHARS
    assert list((tmp_path / "tools").glob("profile-*/profile/profile.json"))
