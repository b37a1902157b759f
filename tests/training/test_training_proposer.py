"""Stage transitions from a model or an exchange folder: the prompt carries the diagnosis, the
reply's JSON becomes the next config (clamped to the ranges), and unusable replies are named and
replaced by the expert rules, never crash the search."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from fake_llm_server import FakeLLMServer, Scripted

from loopwise.core.propose import ExchangeProposer, FailureReason, extract_for, extract_json
from loopwise.core.propose.llm import LLMConfig, LLMProposer
from loopwise.training.config import StageConfig
from loopwise.training.findings import make_finding
from loopwise.training.proposer import ModelTransitions, parse_transition
from loopwise.training.transitions import Bounds

BASE = StageConfig(learning_rate=3e-4, temperature=1.0, difficulty=1)
BOUNDS = Bounds.for_task(6)
COLLAPSE = make_finding("entropy_collapse", "Entropy fell from 1.9 to 0.2 nats while reward stayed at 0.93.",
                                {"entropy_start": 1.9, "entropy_end": 0.2}, 0.8, {"temperature": "up"})
TRACE = [{"step": i + 1, "reward": 0.5 + 0.02 * i, "entropy": 1.0 - 0.05 * i, "frac_reward_zero_std": 0.1,
          "completions/clipped_ratio": 0.0} for i in range(10)] + [{"step": 10, "eval/reward": 0.61,
                                                                    "eval/train_reward": 0.66}]


def reply(changes, note="Move: raise temperature and difficulty together") -> str:
    return f"{note}\n\n```json\n{json.dumps({'changes': changes})}\n```\n"


def test_json_is_taken_from_the_last_fenced_object():
    text = "Move: x\n```json\n{\"a\": 1}\n```\nthen\n```json\n{\"changes\": {\"beta\": 0.01}}\n```\n"
    found = extract_json(text)
    assert json.loads(found.code) == {"changes": {"beta": 0.01}} and found.note == "x"
    assert extract_json("```json\n[1, 2]\n```").reason == FailureReason.SYNTAX_ERROR
    assert extract_json("```json\n{\"a\": \n```").reason == FailureReason.SYNTAX_ERROR
    assert extract_json("```json\n{\"a\": 1}").reason == FailureReason.TRUNCATED
    assert extract_json("no block at all").reason == FailureReason.NO_CODE
    assert extract_for("training", "```\n{\"a\": 1}\n```\n").code == '{"a": 1}'
    assert extract_for("kernels", "```python\nx = 1\n```\n").code == "x = 1\n"


def test_a_reply_becomes_a_clamped_coordinated_transition():
    t = parse_transition(json.dumps({"changes": {"temperature": 9.0, "difficulty": 2, "learning_rate": 1e-4}}),
                         BASE, BOUNDS, "raise temperature")
    assert t.config.temperature == BOUNDS.temperature[1] and t.config.difficulty == 2
    assert t.changes == {"temperature": (1.0, 2.0), "difficulty": (1, 2), "learning_rate": (3e-4, 1e-4)}
    assert isinstance(t.config.difficulty, int)
    for bad, message in (({"steps": 5}, "fixed by the comparison"), ({"warmup": 1}, "unknown"),
                         ({"beta": "high"}, "not a number"), ({}, "at least one knob"),
                         ({"temperature": 1.0}, "changes nothing")):
        with pytest.raises(ValueError, match=message):
            parse_transition(json.dumps({"changes": bad}), BASE, BOUNDS)


class Scripted_:
    """A proposer that answers with fixed results (what an LLM or exchange proposer returns)."""

    def __init__(self, results):
        self.results, self.requests = results, []

    def propose(self, request):
        self.requests.append(request)
        return self.results[:request.n]


def test_unusable_replies_are_named_and_the_expert_fills_in():
    from loopwise.core.propose import Proposal, ProposalFailure

    proposer = Scripted_([Proposal(content=json.dumps({"changes": {"temperature": 1.5, "difficulty": 2}}), note="m",
                                   origin="fake"),
                          Proposal(content=json.dumps({"changes": {"steps": 99}}), origin="fake"),
                          ProposalFailure(reason=FailureReason.TIMEOUT, detail="no answer", origin="fake")])
    source = ModelTransitions(proposer, "Task arithmetic.")
    out = source(BASE, [COLLAPSE], random.Random(0), 3, BOUNDS, reward=0.6, trace=TRACE, path=[(BASE, 0.6)])
    assert len(out) == 3 and len({t.config for t in out}) == 3
    assert out[0].changes == {"temperature": (1.0, 1.5), "difficulty": (1, 2)} and source.used == 1
    assert any("fixed by the comparison" in f for f in source.failures) and any("no answer" in f for f in source.failures)
    request, again = proposer.requests  # the unusable knob is asked again once, the timeout is not
    assert "fixed by the comparison" in again.feedback and again.n == 1
    assert request.kind == "training" and request.n == 3
    assert "Entropy fell from 1.9" in request.findings[0].text
    assert '"learning_rate": 0.0003' in request.candidate and "held-out reward 0.610" in request.evaluation
    assert "stage 1:" in request.memory and "learning_rate 0.0003" in request.memory


def test_an_openai_compatible_server_proposes_the_next_stage(monkeypatch):
    monkeypatch.setenv("LOOPWISE_TEST_KEY", "sk-test")
    server = FakeLLMServer().start()
    try:
        server.queue(Scripted(text=reply({"temperature": 1.25, "entropy_coef": 0.002})),
                     Scripted(text="I am not sure what to change."))
        llm = LLMProposer(LLMConfig(api="openai", model="fake-model", base_url=server.base_url + "/v1",
                                    api_key_env="LOOPWISE_TEST_KEY", timeout_s=5, max_retries=0))
        source = ModelTransitions(llm, "Task arithmetic.")
        out = source(BASE, [COLLAPSE], random.Random(0), 2, BOUNDS, reward=0.9, trace=TRACE)
        first = server.posts()[0]
        system, user = first.body["messages"]
        assert "GRPO" in system["content"] and '{"changes"' in system["content"]
        assert "Entropy fell from 1.9" in user["content"] and "```json" in user["content"]
    finally:
        server.stop()
    assert out[0].changes == {"temperature": (1.0, 1.25), "entropy_coef": (0.0, 0.002)}
    assert out[0].rationale == "raise temperature and difficulty together"
    assert len(out) == 2 and out[1].config != out[0].config  # the reply without JSON: the expert's move instead
    assert any("no ```json block" in f for f in source.failures)


def test_an_exchange_folder_answer_becomes_the_next_stage(tmp_path):
    proposer = ExchangeProposer(tmp_path, timeout_s=10, poll_s=0.02, announce=lambda line: None)

    def answer():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            prompts = sorted(tmp_path.glob("prompt-*.md"))
            if prompts:
                text = prompts[0].read_text()
                assert "What diagnosis found" in text
                (tmp_path / prompts[0].name.replace("prompt", "answer")).write_text(reply({"beta": 0.02}))
                return
            time.sleep(0.02)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    [t] = ModelTransitions(proposer, "Task sorting.")(BASE, [COLLAPSE], random.Random(0), 1, BOUNDS, reward=0.5)
    thread.join()
    assert t.changes == {"beta": (0.0, 0.02)}


def test_a_malformed_answer_is_a_recorded_failure_asked_again_with_its_parse_error(tmp_path):
    """As in kernels: the reply without a ```json block and the one with a knob that does not exist
    are failed proposals with their parse errors, each asked again with that error; the answers to
    the re-prompts are used, and every step is an event in the run."""
    from loopwise.core.propose import Proposal, ProposalFailure, render_prompt

    class Answers:
        def __init__(self):
            self.requests = []

        def propose(self, request):
            self.requests.append(request)
            if len(self.requests) == 1:
                return [ProposalFailure(reason=FailureReason.NO_CODE, detail="no ```json block in the reply",
                                        origin="exchange:a1"),
                        Proposal(content=json.dumps({"changes": {"warmup": 3}}), origin="exchange:a2")]
            knob = {2: {"beta": 0.02}, 3: {"entropy_coef": 0.003}}[len(self.requests)]
            return [Proposal(content=json.dumps({"changes": knob}), note="fixed", origin=f"exchange:a{len(self.requests) + 1}")]

    events = []
    source = ModelTransitions(Answers(), "Task sorting.", name="exchange",
                              record=lambda kind, payload: events.append((kind, payload)))
    out = source(BASE, [COLLAPSE], random.Random(0), 2, BOUNDS, reward=0.5)
    assert [t.by for t in out] == ["exchange", "exchange"]
    assert {k for t in out for k in t.changes} == {"beta", "entropy_coef"}
    kinds = [k for k, _ in events]
    assert kinds == ["proposal_failed", "proposal_failed", "reprompt", "proposal", "reprompt", "proposal"]
    failed = [p for k, p in events if k == "proposal_failed"]
    assert failed[0]["reason"] == "no_code" and "no ```json block" in failed[0]["detail"]
    assert failed[1]["reason"] == "invalid" and "warmup" in failed[1]["detail"] and "unknown" in failed[1]["detail"]
    again = source.proposer.requests[1]
    assert "Your previous answer could not be used: no ```json block" in render_prompt(again).user
    assert "fallback" not in kinds


def test_every_fallback_to_the_rules_is_recorded_and_shown_in_the_report(tmp_path):
    from loopwise.core.propose import ProposalFailure
    from loopwise.core.store import SqliteRunStore
    from loopwise.training.report_html import build_report

    class Silent:
        def propose(self, request):
            return [ProposalFailure(reason=FailureReason.TIMEOUT, detail="no answer within 5 s", origin="x")] * request.n

    store = SqliteRunStore.create(tmp_path, "training.search", "{}")
    store.append("settings", {"task": "sorting", "methods": ["tree"], "budget": 2, "depth": 1, "preset": "smoke"})
    source = ModelTransitions(Silent(), "Task sorting.", name="llm", record=store.append)
    out = source(BASE, [COLLAPSE], random.Random(0), 2, BOUNDS, reward=0.5)
    assert len(out) == 2 and {t.by for t in out} == {"rule fallback"}
    [fallback] = [e.payload for e in store.events() if e.kind == "fallback"]
    assert fallback["from_rules"] == 2 and fallback["from_model"] == 0
    assert fallback["why"] == ["timeout: no answer within 5 s"] * 2
    assert not [e for e in store.events() if e.kind == "reprompt"]  # a lost answer is not asked again
    html = build_report(store).read_text()
    assert "every fallback to the rules" in html and "2 of 2 transitions from the rules" in html
    store.close()


def test_the_tree_records_who_proposed_each_stage():
    from loopwise.training.transitions import propose_transitions

    assert {t.by for t in propose_transitions(BASE, [COLLAPSE], random.Random(0), 2, BOUNDS)} == {"expert"}
