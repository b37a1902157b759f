"""Tool use by the LLM proposer, over both real wire protocols against the scripted local server:
calls run with the model's arguments, results go back in each API's format, rounds are limited,
every round is paid for, and a bad call is answered, never fatal."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest
from chat_tool_conformance import check_chat_tool
from fake_llm_server import GOOD_CODE, call, good, server_error, tool_use

from loopwise.core.propose import FailureReason, Proposal, ProposalRequest
from loopwise.core.propose.llm import (
    Budget,
    BudgetConfig,
    ChatTool,
    LLMConfig,
    LLMProposer,
    ModelPrice,
    ToolCall,
    ToolContext,
    ToolError,
    run_tool_call,
)

APIS = ["openai", "anthropic"]
REQUEST = ProposalRequest(kind="kernels", task="Reference: class Model computes relu(x).")


class Lookup(ChatTool):
    """A test tool that records its calls and answers with what it was asked."""

    name = "lookup"
    description = "Looks a name up."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def run(self, arguments: Mapping[str, Any]) -> str:
        self.calls.append(dict(arguments))
        if arguments["query"] == "boom":
            raise RuntimeError("the index is on fire")
        if arguments["query"] == "refuse":
            raise ToolError("no such name")
        return f"found {arguments['query']} in include/cute/atom/copy_atom.hpp:490"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("LOOPWISE_TEST_KEY", "sk-test")


def make(server, api, tool, *, calls=None, budget=None, **overrides):
    base = server.base_url + "/v1" if api == "openai" else server.base_url
    fields = dict(api=api, model="fake-model", base_url=base, api_key_env="LOOPWISE_TEST_KEY", timeout_s=5,
                  max_retries=1, backoff_initial_s=0.0,
                  prices={"fake-model": ModelPrice(input_per_mtok=2.0, output_per_mtok=8.0)})
    fields.update(overrides)
    return LLMProposer(LLMConfig(**fields), call_log=calls.append if calls is not None else None,
                       budget=budget, sleep=lambda s: None, rng=random.Random(0),
                       toolbox=lambda context: [tool] if context.kind == "kernels" else [])


def tool_messages(api: str, body: dict) -> list[dict]:
    """The tool results a request carries, as (id, content, is_error) dicts, in either wire format."""
    if api == "openai":
        return [{"id": m["tool_call_id"], "content": m["content"], "error": m["content"].startswith("error:")}
                for m in body["messages"] if m["role"] == "tool"]
    return [{"id": b["tool_use_id"], "content": b["content"], "error": b.get("is_error", False)}
            for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "tool_result"]


@pytest.mark.parametrize("api", APIS)
def test_a_tool_call_runs_and_its_result_goes_back_in_the_wire_format(server, api):
    tool, calls = Lookup(), []
    server.queue(tool_use(call("lookup", {"query": "make_tiled_copy", "limit": 3}), text="Let me check."), good())
    budget = Budget()
    [result] = make(server, api, tool, calls=calls, budget=budget).propose(REQUEST)
    assert isinstance(result, Proposal) and result.content == GOOD_CODE
    assert tool.calls == [{"query": "make_tiled_copy", "limit": 3}]
    first, second = server.posts()
    if api == "openai":
        assert first.body["tools"][0]["function"]["name"] == "lookup" and "tool_choice" not in first.body
        assert "lookup" in first.body["messages"][0]["content"]  # the system message names the tools
        assistant, answer = second.body["messages"][-2:]
        assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "call_1"
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"])["query"] == "make_tiled_copy"
        assert answer == {"role": "tool", "tool_call_id": "call_1",
                          "content": "found make_tiled_copy in include/cute/atom/copy_atom.hpp:490"}
    else:
        assert first.body["tools"][0]["name"] == "lookup" and first.body["tools"][0]["input_schema"]["required"]
        assert "lookup" in first.body["system"] and "tool_choice" not in first.body
        assistant, answer = second.body["messages"][-2:]
        assert assistant["role"] == "assistant"
        assert [b["type"] for b in assistant["content"]] == ["text", "tool_use"]
        assert assistant["content"][1]["input"] == {"query": "make_tiled_copy", "limit": 3}
        assert answer == {"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": "call_1",
            "content": "found make_tiled_copy in include/cute/atom/copy_atom.hpp:490"}]}
    # both rounds are paid for: 1000 + 200 for the answer, 1000 + 50 for the tool round
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2000, 250)
    assert result.usage.cost_usd == pytest.approx(2000 * 2e-6 + 250 * 8e-6)
    assert budget.spent_tokens == 2250
    assert [(r.round, r.outcome) for r in calls] == [(0, "tool_use"), (1, "ok")]
    assert calls[0].tool_calls[0].name == "lookup" and not calls[0].tool_results[0].is_error
    assert sum(r.usage.total_tokens for r in calls) == 2250


@pytest.mark.parametrize("api", APIS)
def test_after_the_round_limit_the_model_must_answer_without_tools(server, api):
    tool = Lookup()
    server.queue(*[tool_use(call("lookup", {"query": f"q{i}"})) for i in range(2)], good())
    [result] = make(server, api, tool, max_tool_rounds=2).propose(REQUEST)
    assert result.ok and [c["query"] for c in tool.calls] == ["q0", "q1"]
    posts = server.posts()
    assert len(posts) == 3
    assert all("tool_choice" not in p.body for p in posts[:2])
    last = posts[2].body
    assert last["tool_choice"] == ("none" if api == "openai" else {"type": "none"})
    assert last["tools"]  # still declared: the rounds refer to them
    closing = last["messages"][-1]["content"]
    closing_text = closing if api == "openai" else closing[-1]["text"]
    assert "answer now" in closing_text
    assert len(tool_messages(api, last)) == 2


@pytest.mark.parametrize("api", APIS)
def test_a_model_that_keeps_calling_tools_gets_no_more_rounds(server, api):
    tool = Lookup()
    server.queue(*[tool_use(call("lookup", {"query": f"q{i}"})) for i in range(3)], good())
    [result] = make(server, api, tool, max_tool_rounds=2).propose(REQUEST)
    assert result.reason == FailureReason.NO_CODE and result.usage.input_tokens == 3000
    assert len(tool.calls) == 2 and len(server.posts()) == 3  # the fourth reply was never asked for


@pytest.mark.parametrize("api", APIS)
def test_malformed_calls_are_answered_with_error_results(server, api):
    tool = Lookup()
    bad_arguments = "{\"query\": \"make_tiled" if api == "openai" else {"query": 5}
    server.queue(tool_use(call("nope", {"query": "x"}), call("lookup", bad_arguments), call("lookup", {"limit": 2}),
                          call("lookup", {"query": "boom"}), call("lookup", {"query": "refuse"})), good())
    [result] = make(server, api, tool).propose(REQUEST)
    assert result.ok and [c["query"] for c in tool.calls] == ["boom", "refuse"]
    answers = tool_messages(api, server.posts()[1].body)
    assert [a["id"] for a in answers] == ["call_1", "call_2", "call_3", "call_4", "call_5"]
    assert all(a["error"] for a in answers)
    unknown, malformed, missing, crashed, refused = (a["content"] for a in answers)
    assert "unknown tool 'nope'" in unknown and "lookup" in unknown
    assert ("not valid JSON" if api == "openai" else "'query' must be a string") in malformed
    assert "missing argument 'query'" in missing
    assert "RuntimeError: the index is on fire" in crashed and refused == "error: no such name"


@pytest.mark.parametrize("api", APIS)
def test_a_spent_budget_ends_the_tool_rounds(server, api):
    tool = Lookup()
    server.queue(tool_use(call("lookup", {"query": "a"})), good())
    [result] = make(server, api, tool, budget=Budget(BudgetConfig(max_tokens=1000))).propose(REQUEST)
    assert result.ok and len(server.posts()) == 2
    assert "tool_choice" in server.posts()[1].body  # asked for the answer at once


@pytest.mark.parametrize("api", APIS)
def test_a_failed_later_round_keeps_the_usage_of_the_earlier_ones(server, api):
    server.queue(tool_use(call("lookup", {"query": "a"})), server_error(400))
    [result] = make(server, api, Lookup()).propose(REQUEST)
    assert result.reason == FailureReason.API_ERROR and result.usage.input_tokens == 1000


def test_tools_off_or_another_kind_sends_no_tools(server):
    server.queue(good(), good())
    assert make(server, "openai", Lookup(), tools=False).propose(REQUEST)[0].ok
    assert make(server, "openai", Lookup(), max_tool_rounds=0).propose(REQUEST)[0].ok
    assert all("tools" not in p.body for p in server.posts())
    proposer = make(server, "openai", Lookup())
    assert proposer.tools_for(ToolContext(kind="training")) == ()
    assert [t.name for t in proposer.tools_for(ToolContext(kind="kernels"))] == ["lookup"]


def test_the_test_tool_conforms():
    assert check_chat_tool(Lookup(), {"query": "q", "limit": 1}).startswith("found q")


def test_run_tool_call_cuts_long_results():
    class Chatty(Lookup):
        def run(self, arguments):
            return "x" * 50_000

    result = run_tool_call({"lookup": Chatty()}, ToolCall("1", "lookup", '{"query": "q"}'))
    assert not result.is_error and len(result.content) < 17_000 and result.content.endswith("characters]")
    empty = run_tool_call({"lookup": Lookup()}, ToolCall("2", "lookup", ""))
    assert empty.is_error and "missing argument 'query'" in empty.content


@pytest.mark.parametrize(("path", "body", "fault"), [
    ("/v1/chat/completions", {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "well?"}]}, "no 'tool' message"),
    ("/v1/chat/completions", {"messages": [{"role": "tool", "tool_call_id": "c9", "content": "x"}]},
     "must answer a preceding"),
    ("/v1/messages", {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "go on"}]}], "tools": [{"name": "f"}]},
     "without `tool_result` blocks"),
    ("/v1/messages", {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]},
     "must define tools"),
    ("/v1/messages", {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
     "alternate"),
])
def test_the_fake_server_rejects_conversations_the_real_apis_reject(server, path, body, fault):
    import urllib.error
    import urllib.request

    server.queue(good())
    req = urllib.request.Request(server.base_url + path, method="POST", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "x-api-key": "k",
                                          "anthropic-version": "2023-06-01"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 400 and fault in info.value.read().decode()
    assert len(server.script) == 1  # the scripted reply was not used up


@pytest.mark.parametrize("api", APIS)
def test_a_server_that_refuses_tools_is_asked_again_without_them(server, api):
    """vLLM started without a tool parser answers a request carrying tools with 400: the proposal
    is asked again without tools, and so is every later one (one refusal, not one per proposal)."""
    tool = Lookup()
    server.queue(server_error(400), good(), good())
    proposer = make(server, api, tool)
    [first] = proposer.propose(REQUEST)
    [second] = proposer.propose(REQUEST)
    assert first.ok and second.ok and tool.calls == []
    refused, retried, later = server.posts()
    assert "tools" in refused.body and "tools" not in retried.body and "tools" not in later.body
    system = retried.body["messages"][0]["content"] if api == "openai" else retried.body["system"]
    assert "lookup" not in system  # the note about the tools went with them


@pytest.mark.parametrize("api", APIS)
def test_a_client_error_without_tools_too_is_the_answer(server, api):
    server.queue(server_error(400), server_error(400), good())
    [result] = make(server, api, Lookup()).propose(REQUEST)
    assert result.reason == FailureReason.API_ERROR and "HTTP 400" in result.detail
    assert len(server.posts()) == 2  # once with tools, once without; no retry beyond


def test_the_tools_are_made_once_for_the_run_each_request_comes_from(server, tmp_path):
    """The toolbox is told the request's engine, problem and rules, and the proposer's device and folder."""
    made = []
    server.queue(good(), good(), good())
    config = LLMConfig(model="fake-model", base_url=server.base_url + "/v1", api_key_env="LOOPWISE_TEST_KEY",
                       max_retries=0)
    proposer = LLMProposer(config, toolbox=lambda context: made.append(context) or [Lookup()], device="cuda:0",
                           tool_folder=tmp_path)
    request = ProposalRequest(kind="kernels", task="class Model: ...", rules=("Precision policy relaxed.",))
    proposer.propose(request)
    proposer.propose(request)
    proposer.propose(ProposalRequest(kind="kernels", task="another problem"))
    assert made == [ToolContext(kind="kernels", task="class Model: ...", rules=("Precision policy relaxed.",),
                                device="cuda:0", folder=tmp_path),
                    ToolContext(kind="kernels", task="another problem", device="cuda:0", folder=tmp_path)]
