"""The LLM proposer from the user's side: real SDKs, real sockets, a scripted local server."""

from __future__ import annotations

import random

import pytest
from fake_llm_server import (
    GOOD_CODE,
    FakeLLMServer,
    good,
    malformed,
    no_code,
    rate_limited,
    server_error,
    slow,
    truncated,
)

from loopwise.core.propose import (
    BudgetExhausted,
    FailureReason,
    FindingNote,
    Proposal,
    ProposalFailure,
    ProposalRequest,
    Snippet,
)
from loopwise.core.propose.llm import (
    Budget,
    BudgetConfig,
    LLMConfig,
    LLMProposer,
    ModelPrice,
)
from loopwise.core.propose.llm._clients import parse_retry_after
from loopwise.errors import UserError

KEY = "sk-test-123"
APIS = ["openai", "anthropic"]
REQUEST = ProposalRequest(
    kind="kernels", task="Reference: class Model computes relu(x) for x of shape (4096, 4096).",
    candidate="import torch\nclass ModelNew(torch.nn.Module):\n    pass\n",
    candidate_summary="the eager baseline",
    evaluation="correct; 1.30 ms vs 1.28 ms reference",
    findings=(FindingNote(text="memory-bound at 41% of DRAM peak", evidence={"dram_pct": 41}),),
    memory="tried: vectorized loads (no gain)",
    snippets=(Snippet(title="a Triton elementwise kernel", code="import triton"),),
)


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("LOOPWISE_TEST_KEY", KEY)


class SleepRecorder:
    def __init__(self):
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def make(server, api, *, calls=None, sleep=None, budget=None, **overrides):
    base = server.base_url + "/v1" if api == "openai" else server.base_url
    fields = dict(api=api, model="fake-model", base_url=base, api_key_env="LOOPWISE_TEST_KEY",
                  timeout_s=5, max_retries=3, backoff_initial_s=0.01, backoff_max_s=1.0,
                  prices={"fake-model": ModelPrice(input_per_mtok=2.0, output_per_mtok=8.0)})
    fields.update(overrides)
    log = calls.append if calls is not None else None
    return LLMProposer(LLMConfig(**fields), call_log=log, sleep=sleep or SleepRecorder(),
                       budget=budget, rng=random.Random(0))


def test_openai_success_sends_the_prompt_and_meters_the_call(server):
    server.queue(good())
    calls = []
    [result] = make(server, "openai", calls=calls).propose(REQUEST)
    assert isinstance(result, Proposal) and result.ok
    assert result.content == GOOD_CODE
    assert result.note == "fuse relu into one kernel"
    assert result.origin == "openai:fake-model"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1000, 200)
    assert result.usage.cost_usd == pytest.approx(1000 * 2e-6 + 200 * 8e-6)
    [req] = server.posts()
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body["model"] == "fake-model"
    assert req.body["max_completion_tokens"] == 16384
    system, user = req.body["messages"]
    assert system["role"] == "system" and "ModelNew" in system["content"]
    for text in ("relu(x)", "the eager baseline", "1.30 ms", "dram_pct=41",
                 "vectorized loads", "import triton", "```python"):
        assert text in user["content"]
    [record] = calls
    assert record.outcome == "ok" and record.attempts == 1 and record.usage == result.usage
    assert record.reply.startswith("Move:") and "dram_pct=41" in record.prompt.user


def test_anthropic_success_uses_the_messages_api(server):
    server.queue(good())
    [result] = make(server, "anthropic", temperature=0.7).propose(REQUEST)
    assert isinstance(result, Proposal) and result.content == GOOD_CODE
    assert result.origin == "anthropic:fake-model"
    assert result.usage.cost_usd == pytest.approx(0.0036)
    [req] = server.posts()
    assert req.path == "/v1/messages"
    sent_key = req.headers.get("x-api-key") or req.headers["authorization"].removeprefix("Bearer ")
    assert sent_key == KEY and req.headers["anthropic-version"]
    assert req.body["model"] == "fake-model" and req.body["temperature"] == 0.7
    assert "ModelNew" in req.body["system"]
    assert "memory-bound" in req.body["messages"][0]["content"]


def test_openai_extra_body_and_max_tokens_field_reach_the_server(server):
    server.queue(good())
    proposer = make(server, "openai", extra_body={"top_k": 20}, max_tokens_field="max_tokens",
                    max_output_tokens=777)
    assert proposer.propose(REQUEST)[0].ok
    body = server.posts()[0].body
    assert body["top_k"] == 20 and body["max_tokens"] == 777


def test_the_fake_server_lists_models_through_the_sdk(server):
    import openai

    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in client.models.list()] == ["fake-model"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(("step", "reason"), [
    (malformed, FailureReason.SYNTAX_ERROR),
    (no_code, FailureReason.NO_CODE),
    (truncated, FailureReason.TRUNCATED),
])
def test_bad_replies_are_typed_failures_with_usage(server, api, step, reason):
    server.queue(step())
    calls = []
    [result] = make(server, api, calls=calls).propose(REQUEST)
    assert isinstance(result, ProposalFailure) and not result.ok
    assert result.reason == reason
    assert result.raw and result.detail and result.usage.input_tokens == 1000
    assert len(server.posts()) == 1  # a bad reply is not retried
    assert calls[0].outcome == reason.value


@pytest.mark.parametrize("api", APIS)
def test_429_and_5xx_are_retried_honouring_retry_after(server, api):
    server.queue(rate_limited("0.05"), server_error(503), good())
    sleep, calls = SleepRecorder(), []
    [result] = make(server, api, sleep=sleep, calls=calls, backoff_jitter=0.25).propose(REQUEST)
    assert result.ok
    assert len(server.posts()) == 3
    first, second = sleep.waits
    assert first == pytest.approx(0.05)  # the server's Retry-After, not our backoff
    assert 0.02 <= second <= 0.02 * 1.25  # initial 0.01 doubled, plus at most 25% jitter
    assert calls[0].attempts == 3 and calls[0].waits == tuple(sleep.waits)
    retry_counts = [r.headers.get("x-stainless-retry-count") for r in server.posts()]
    assert set(retry_counts) <= {"0", None}  # the SDK's own retry loop stayed off


def test_retry_after_is_capped_and_real_sleep_works(server):
    server.queue(rate_limited("30"), good())
    sleep = SleepRecorder()
    [result] = make(server, "openai", sleep=sleep, backoff_max_s=0.02).propose(REQUEST)
    assert result.ok and sleep.waits == [0.02]
    server.queue(rate_limited("0.05"), good())
    import time

    waits = []

    def real_sleep(seconds):
        waits.append(seconds)
        time.sleep(seconds)

    proposer = make(server, "anthropic", sleep=real_sleep)
    assert proposer.propose(REQUEST)[0].ok
    assert waits == [pytest.approx(0.05)]  # the server's Retry-After, waited with the real sleep


@pytest.mark.parametrize("api", APIS)
def test_retries_run_out_into_an_api_error(server, api):
    server.queue(*[server_error(500)] * 3)
    [result] = make(server, api, max_retries=2).propose(REQUEST)
    assert result.reason == FailureReason.API_ERROR
    assert "HTTP 500" in result.detail and "3 attempt" in result.detail
    assert result.usage is None and len(server.posts()) == 3


@pytest.mark.parametrize("api", APIS)
def test_a_client_error_is_not_retried(server, api):
    # without tools: with tools a 400 may mean "no tool calling here", which is asked again without
    # them once (tests/core/propose/test_llm_tools.py); a second 400 is then the answer
    server.queue(server_error(400), good())
    [result] = make(server, api, tools=False).propose(REQUEST)
    assert result.reason == FailureReason.API_ERROR and "HTTP 400" in result.detail
    assert len(server.posts()) == 1


@pytest.mark.parametrize("api", APIS)
def test_a_slow_server_times_out_and_is_retried(server, api):
    server.queue(slow(3.0), good())
    [result] = make(server, api, timeout_s=0.3).propose(REQUEST)
    assert result.ok and len(server.posts()) == 2
    server.queue(slow(3.0), slow(3.0))
    [result] = make(server, api, timeout_s=0.3, max_retries=1).propose(REQUEST)
    assert result.reason == FailureReason.TIMEOUT and "timed out" in result.detail


def test_a_lost_connection_is_an_api_error_not_an_exception():
    with FakeLLMServer() as srv:  # bound, never served, then closed: nothing listens
        url = srv.base_url + "/v1"
    config = LLMConfig(model="m", base_url=url, api_key_env="LOOPWISE_TEST_KEY", max_retries=1,
                       backoff_initial_s=0.0, timeout_s=2)
    [result] = LLMProposer(config, sleep=SleepRecorder()).propose(REQUEST)
    assert result.reason == FailureReason.API_ERROR and "connection" in result.detail.lower()


@pytest.mark.parametrize("api", APIS)
def test_a_token_budget_stops_further_calls(server, api):
    server.queue(good(), good(), good())
    proposer = make(server, api, budget=Budget(BudgetConfig(max_tokens=2000)))
    results = proposer.propose(ProposalRequest(kind="kernels", task="t", n=3))
    assert [r.ok for r in results] == [True, True, False]
    assert isinstance(results[2], BudgetExhausted)
    assert results[2].reason == FailureReason.BUDGET_EXHAUSTED
    assert results[2].spent_tokens == 2400 and "2400 tokens" in results[2].detail
    assert len(server.posts()) == 2


def test_a_dollar_budget_is_shared_and_stops_every_later_call(server):
    budget = Budget(BudgetConfig(max_usd=0.005))
    server.queue(good(), good(), good())
    first = make(server, "openai", budget=budget).propose(ProposalRequest(kind="kernels", task="t", n=3))
    assert [r.ok for r in first] == [True, True, False]
    assert budget.spent_usd == pytest.approx(0.0072)
    later = make(server, "anthropic", budget=budget).propose(ProposalRequest(kind="kernels", task="t", n=2))
    assert all(isinstance(r, BudgetExhausted) for r in later)
    assert len(server.posts()) == 2


def test_failed_replies_count_against_the_budget(server):
    server.queue(truncated(), good())
    results = make(server, "openai", budget=Budget(BudgetConfig(max_tokens=5000))).propose(
        ProposalRequest(kind="kernels", task="t", n=2))
    assert results[0].reason == FailureReason.TRUNCATED
    assert isinstance(results[1], BudgetExhausted)  # 1000 + 4096 tokens spent by the bad reply


def test_an_unpriced_model_costs_none_and_spends_no_dollars(server):
    server.queue(good(), good())
    proposer = make(server, "openai", prices={}, budget=None)
    proposer.budget = Budget(BudgetConfig(max_usd=0.0001))
    results = proposer.propose(ProposalRequest(kind="kernels", task="t", n=2))
    assert all(r.ok for r in results)
    assert results[0].usage.cost_usd is None and proposer.budget.spent_usd == 0.0


def test_from_config_takes_a_yaml_section(server):
    server.queue(good())
    section = {"api": "openai", "model": "fake-model", "base_url": server.base_url + "/v1",
               "api_key_env": "LOOPWISE_TEST_KEY", "budget": {"max_tokens": 10}}
    proposer = LLMProposer.from_config(section)
    assert proposer.config.budget.max_tokens == 10 and proposer.propose(REQUEST)[0].ok
    with pytest.raises(ValueError, match="modle"):
        LLMProposer.from_config({"modle": "x"})


def test_a_hosted_api_without_a_key_is_a_user_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        LLMProposer(LLMConfig(model="gpt-x"))


def test_a_local_server_works_without_a_key(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.queue(good())
    config = LLMConfig(model="fake-model", base_url=server.base_url + "/v1")
    assert LLMProposer(config).propose(REQUEST)[0].ok
    assert server.posts()[0].headers["authorization"] == "Bearer EMPTY"


def test_retry_after_header_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_the_fake_anthropic_endpoint_insists_on_its_headers(server):
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(server.base_url + "/v1/messages", method="POST",
                                 data=json.dumps({"model": "m"}).encode(),
                                 headers={"content-type": "application/json", "x-api-key": KEY})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 401
    assert json.loads(info.value.read())["error"]["type"] == "authentication_error"


def test_a_repair_request_sends_the_failed_code_its_reasons_and_its_log(server):
    from loopwise.core.propose import FindingNote, ProposalRequest, ProposalRole

    server.queue(good(note="Move: fix the arange typo"))
    request = ProposalRequest(kind="kernels", task="class Model computes relu(x)", candidate="import triton\n# tl.arang(0, 16)\n",
                              evaluation="crash", role=ProposalRole.REPAIR, log="AttributeError: ... 'arang'",
                              findings=(FindingNote(text="reject runtime_error: module 'triton.language' has no "
                                                         "attribute 'arang'"),))
    [result] = make(server, "openai").propose(request)
    assert result.ok and result.note == "fix the arange typo"
    [req] = server.posts()
    user = req.body["messages"][1]["content"]
    assert "## The candidate that failed" in user and "tl.arang(0, 16)" in user
    assert "has no attribute 'arang'" in user and "AttributeError: ... 'arang'" in user and "Fix this candidate" in user
