"""Roles from the user's side: each role (analyst, coder, repairer, reviewer) has its own prompt and
may be played by its own model; the analyst and the reviewer answer in JSON, through a model or
through the exchange folder."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fake_llm_server import FakeLLMServer, Scripted, good

from loopwise.core.propose import ExchangeProposer, ProposalRequest, ProposalRole, make_proposer, render_prompt
from loopwise.core.propose.roles import Plan, Review, parse_plan, parse_review, parse_role_models, parse_roles
from loopwise.errors import UserError

TASK = "Reference: class Model computes torch.relu(x) for x of shape (4096, 4096)."
CANDIDATE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
PLAN = {"move": "vectorize the loads to 16 bytes", "rationale": "memory-bound at 41% of DRAM peak",
        "tools": ["ncu"]}


def _json_reply(value: dict) -> Scripted:
    return Scripted(text=f"Here is my pick.\n\n```json\n{json.dumps(value)}\n```\n")


def test_role_models_are_read_from_role_equals_model():
    assert parse_role_models(["analyst=small", "reviewer=big", "coder=code"]) == {
        "analyst": "small", "reviewer": "big", "coder": "code"}
    assert parse_roles("analyst, reviewer") == ("analyst", "reviewer")


@pytest.mark.parametrize("values, message", [
    (["analyst"], "expected ROLE=MODEL"),
    (["planner=m"], "unknown role 'planner' (expected coder, repairer, analyst, reviewer)"),
    (["analyst="], "expected ROLE=MODEL"),
    (["coder=a", "coder=b"], "the coder is given twice"),
])
def test_a_bad_role_model_is_one_line(values, message):
    with pytest.raises(UserError) as info:
        parse_role_models(values)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_model_for_a_role_that_is_off_says_how_to_switch_it_on():
    with pytest.raises(UserError, match="the reviewer is off; add --roles reviewer"):
        parse_role_models(["reviewer=m"], enabled=("analyst",))
    with pytest.raises(UserError, match="'coder' is not a role that can be switched on"):
        parse_roles("coder")


def test_each_role_has_its_own_prompt():
    def rendered(role):
        prompt = render_prompt(ProposalRequest(task=TASK, candidate=CANDIDATE, kind="kernels", role=role))
        return prompt.system + prompt.user

    analyst, review, coder = (rendered(r) for r in (ProposalRole.ANALYST, ProposalRole.REVIEW, ProposalRole.IMPROVE))
    assert "You are the analyst" in analyst and '"move"' in analyst and "```python block" not in analyst
    assert "You are the reviewer" in review and '"verdict"' in review and "## The candidate under review" in review
    assert "You are an expert GPU performance engineer" in coder and "```python block" in coder
    planned = render_prompt(ProposalRequest(task=TASK, kind="kernels", plan=Plan(**{**PLAN, "tools": ()}).as_text()))
    assert "## The analyst's plan for this step\n\nMove: vectorize the loads to 16 bytes" in planned.user


def test_each_role_goes_to_its_own_model_and_the_analyst_answers_in_json():
    server = FakeLLMServer().start()
    try:
        server.queue(_json_reply(PLAN), good())
        llm = {"model": "coder-model", "base_url": server.base_url + "/v1", "api_key_env": "LOOPWISE_NO_KEY",
               "tools": False, "max_retries": 0}
        proposer = make_proposer("llm", "kernels", llm=llm, role_models={"analyst": "analyst-model"})
        [plan] = proposer.propose(ProposalRequest(task=TASK, candidate=CANDIDATE, kind="kernels",
                                                  role=ProposalRole.ANALYST))
        [code] = proposer.propose(ProposalRequest(task=TASK, candidate=CANDIDATE, kind="kernels"))
    finally:
        server.stop()
    assert [p.body["model"] for p in server.posts()] == ["analyst-model", "coder-model"]
    assert plan.ok and plan.origin == "openai:analyst-model" and parse_plan(plan.content) == Plan(
        move=PLAN["move"], rationale=PLAN["rationale"], tools=("ncu",))
    assert code.ok and "class ModelNew" in code.content and code.origin == "openai:coder-model"
    assert "You are the analyst" in server.posts()[0].body["messages"][0]["content"]


def test_answers_that_are_not_a_plan_or_a_review_say_what_is_missing():
    assert not parse_plan('{"rationale": "x"}').ok and "no \"move\"" in parse_plan('{"rationale": "x"}').detail
    assert parse_review('{"verdict": "Exploit", "explanation": "it caches the output"}') == Review(
        "exploit", "it caches the output")
    bad = parse_review('{"verdict": "fine"}')
    assert not bad.ok and "honest, exploit, unsure" in bad.detail


def test_the_exchange_plays_the_analyst_and_the_reviewer(tmp_path):
    folder = tmp_path / "x"
    lines: list[str] = []
    proposer = ExchangeProposer(folder, timeout_s=20, poll_s=0.01, announce=lines.append)
    review = {"verdict": "exploit", "explanation": "forward returns a cached tensor"}

    def agent():
        for answer_id, value in (("0001", PLAN), ("0002", review)):
            while not (folder / f"prompt-{answer_id}.md").exists():
                time.sleep(0.01)
            (folder / f"answer-{answer_id}.md").write_text(f"```json\n{json.dumps(value)}\n```\n")

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    [plan] = proposer.propose(ProposalRequest(task=TASK, candidate=CANDIDATE, kind="kernels",
                                              role=ProposalRole.ANALYST))
    [read] = proposer.propose(ProposalRequest(task=TASK, candidate=CANDIDATE, kind="kernels",
                                              role=ProposalRole.REVIEW))
    thread.join(timeout=5)
    assert "one ```json block" in lines[0] and "You are the analyst" in (folder / "prompt-0001.md").read_text()
    assert parse_plan(plan.content).move == PLAN["move"]
    assert parse_review(read.content) == Review("exploit", "forward returns a cached tensor")
