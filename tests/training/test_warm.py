"""The warm start of a task without reference answers: it learns only from sampled completions the
verifier accepts, exactly the tokens sampled (also with a BPE tokenizer), raises the pass rate, and
says plainly when the verifier accepts nothing."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import torch

from loopwise.errors import UserError
from loopwise.training import warm
from loopwise.training.grpo import evaluate
from loopwise.training.policy import Vocab, make_policy


@dataclass(frozen=True)
class Ex:
    prompt: str
    answer: str | None = None
    meta: dict = field(default_factory=dict)


class FirstLetter:
    """Repeat the prompt's first letter; no reference answers, only the verifier."""

    name = "first_letter"

    def __init__(self, accept: bool = True) -> None:
        self.accept, self.scored = accept, []

    def example(self, rng: random.Random, difficulty: int = 0) -> Ex:
        return Ex("".join(rng.choice("abc") for _ in range(3)) + ":")

    def score(self, e: Ex, completion: str) -> float:
        value = float(self.accept and completion == e.prompt[0])
        self.scored.append((e.prompt, completion, value))
        return value


VOCAB = Vocab("abc:")


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    task = FirstLetter()
    return task, make_policy(VOCAB, "smoke", max_len=16), [task.example(rng) for _ in range(300)], \
        [task.example(rng) for _ in range(64)]


def test_verifier_only_warm_start_learns_from_accepted_samples_only(monkeypatch):
    task, policy, train, check = _setup()
    before = evaluate(policy, VOCAB, task, check, 3, greedy=False, seed=9)
    learned = []
    real = warm.rows_batch
    monkeypatch.setattr(warm, "rows_batch", lambda v, pairs, d: learned.extend(pairs) or real(v, pairs, d))
    out = warm.warm_start(policy, VOCAB, task, train, check, 3, target=(0.5, 1.0), check_every=20, max_steps=300)
    after = evaluate(policy, VOCAB, task, check, 3, greedy=False, seed=9)
    assert out["source"] == "accepted samples" and out["accepted"] > 0 and out["steps"] > 0
    assert before < 0.2 and after >= 0.5, (before, after, out)
    accepted = {(p, c) for p, c, v in task.scored if v == 1.0}
    assert learned and all((VOCAB.decode(p), VOCAB.decode(c)) in accepted for p, c in learned)


def test_a_verifier_that_accepts_nothing_is_a_one_line_error():
    _, policy, train, check = _setup()
    with pytest.raises(UserError, match="needs reference answers or completions the verifier accepts") as caught:
        warm.warm_start(policy, VOCAB, FirstLetter(accept=False), train, check, 3, check_every=10)
    assert "\n" not in str(caught.value) and "none of 512 sampled completions" in str(caught.value)


def _policy_must_not_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the policy was run")

    monkeypatch.setattr(warm, "sample", refuse)
    monkeypatch.setattr(warm, "evaluate_lengths", refuse)


def test_a_fresh_policy_s_warm_start_fails_before_running_the_policy_when_no_draw_is_accepted(monkeypatch):
    _, policy, train, check = _setup()
    _policy_must_not_run(monkeypatch)
    with pytest.raises(UserError, match="needs reference answers or completions the verifier accepts") as caught:
        warm.warm_start(policy, VOCAB, FirstLetter(accept=False), train, check, 3, fresh_policy=True)
    assert "\n" not in str(caught.value) and f"none of {warm.UPFRONT_DRAWS} sampled completions" in str(caught.value)


def test_a_fresh_policy_s_upfront_check_lets_a_task_it_can_learn_through():
    task, policy, train, check = _setup()
    out = warm.warm_start(policy, VOCAB, task, train, check, 3, target=(0.5, 1.0), check_every=20, max_steps=300,
                          fresh_policy=True)
    assert out["source"] == "accepted samples" and out["accepted"] > 0 and out["pass_rate"] >= 0.5


def test_a_reasoning_gym_dataset_no_draw_solves_fails_before_its_policy_runs(monkeypatch):
    from loopwise.training.session import Session

    session = Session("rg:graph_color", "cpu")
    _policy_must_not_run(monkeypatch)
    with pytest.raises(UserError, match="needs reference answers or completions the verifier accepts") as caught:
        session.prepare()
    assert "\n" not in str(caught.value) and "rg:graph_color" in str(caught.value)


def test_accepted_completions_are_kept_as_the_tokens_sampled_with_a_bpe_tokenizer(monkeypatch):
    from loopwise.training.hf_policy import HFVocab
    from loopwise.training.policy import Samples, left_pad
    from tests.training.test_hf_policy import _bpe_tokenizer

    tokenizer = _bpe_tokenizer()
    vocab = HFVocab(tokenizer, len(tokenizer))
    merged = vocab.encode("46")  # one BPE token
    split = [vocab.encode("4")[0], vocab.encode("6")[0]]  # the same text as two tokens, as a policy may sample it
    assert len(merged) == 1 and vocab.decode(split) == vocab.decode(merged) == "46"

    def sampled(policy, v, prompts, max_new_tokens, generator=None):  # every row samples the split spelling
        rows = [v.encode(p) + split + [v.end] for p in prompts]
        ids, valid = left_pad(rows, v.pad, "cpu")
        width = ids.shape[1] - len(split) - 1
        return Samples(ids, valid, width, valid[:, width:], ["46"] * len(prompts), [False] * len(prompts))

    monkeypatch.setattr(warm, "sample", sampled)
    task = type("Sum", (), {"score": lambda self, e, c: float(c == "46")})()
    accepted = {}
    warm.harvest(torch.nn.Linear(1, 1), vocab, task, [Ex("12+34=")], 4, random.Random(0), accepted)
    assert list(accepted.values()) == [(vocab.encode("12+34="), split)]
    ids, valid, mask = warm.rows_batch(vocab, list(accepted.values()), "cpu")
    assert [i for i, m in zip(ids[0].tolist(), mask[0].tolist()) if m] == split + [vocab.end]


def test_a_policy_already_in_the_target_takes_no_step_and_its_record_is_strict_json(monkeypatch):
    """A pretrained policy can pass the first check: nothing is trained, and the warm start's
    record (kept in the run store, which takes strict JSON only) has no NaN for a loss never taken."""
    import json

    monkeypatch.setattr(warm, "evaluate_lengths", lambda *a, **k: (0.5, 3.0))
    task, policy, train, check = _setup()
    before = [p.detach().clone() for p in policy.parameters()]
    out = warm.warm_start(policy, VOCAB, task, train, check, 2, target=(0.2, 0.8))
    assert out["steps"] == 0 and out["in_target"] and out["loss"] is None
    json.dumps(out, allow_nan=False)
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_a_step_whose_loss_overflows_is_skipped_and_the_weights_stay_finite(monkeypatch):
    """A supervised step whose loss is not finite (an overflow in reduced precision) would write
    NaN into every weight, and the next sampling would fail on a NaN distribution."""
    import json

    task, policy, train, check = _setup()
    answered = [Ex(e.prompt, e.prompt[0]) for e in train]
    monkeypatch.setattr(warm, "evaluate_lengths", lambda *a, **k: (0.0, 3.0))
    plain = torch.nn.functional.cross_entropy
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", lambda *a, **k: plain(*a, **k) * float("nan"))
    before = [p.detach().clone() for p in policy.parameters()]
    out = warm.warm_start(policy, VOCAB, task, answered, check, 2, max_steps=3, check_every=1)
    assert out["steps"] == 3 and out["nonfinite_steps"] == 3 and out["loss"] is None
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    json.dumps(out, allow_nan=False)
