"""The character policy's vocabulary comes from the task: its characters (alphabet or a sample of
its examples), an unknown token for any other, and an end token that is no character, so a
reasoning-gym dataset with spaces, letters and multi-line answers trains."""

from __future__ import annotations

import inspect

import pytest

from loopwise.training import session
from loopwise.training.policy import END, PAD, UNK, Vocab
from loopwise.training.tasks import get_task, task_characters

TINY = session.Preset("smoke", stage_steps=2, prompts_per_step=4, num_generations=4, eval_n=8, pool_n=60,
                      warm_max_steps=10, warm_check_every=5, probe_n=8)


def test_a_built_in_tasks_vocabulary_is_its_alphabet_and_an_unknown_token():
    s = session.Session("arithmetic", "smoke")
    assert s.vocab.itos == [PAD, END, *sorted("0123456789+-="), UNK]
    assert s.vocab.encode("1(2") == [s.vocab.stoi["1"], s.vocab.unk, s.vocab.stoi["2"]]


def test_a_sampled_vocabulary_covers_the_datasets_text_and_falls_back_to_unknown():
    pytest.importorskip("reasoning_gym")
    task = get_task("rg:word_sorting")
    chars = task_characters(task)
    assert task_characters(task) == chars and {" ", ",", "a", "s"} <= set(chars)
    vocab = Vocab(chars, unk=True)
    for example in task.dataset("tune", 20, 0):
        text = example.prompt + example.answer
        known = "".join(c if c in chars else UNK for c in text)
        assert vocab.decode(vocab.encode(text)) == known
    assert vocab.decode(vocab.encode("a☃b")) == f"a{UNK}b"


def test_an_answer_that_spans_lines_round_trips_and_ends_at_the_end_token():
    vocab = Vocab("0123 \n", unk=True)
    answer = "1 2\n3 0"
    ids = vocab.encode(answer)
    assert vocab.end not in ids and vocab.decode(ids + [vocab.end] + vocab.encode("99")) == answer
    legacy = Vocab("0123")  # no newline in the alphabet: "\n" is the end token, as before
    assert legacy.encode("1\n") == [legacy.stoi["1"], legacy.end]


@pytest.mark.parametrize("name", ["rg:leg_counting", pytest.param("rg:mini_sudoku", marks=pytest.mark.slow)])
def test_a_reasoning_gym_session_warm_starts_and_trains_a_stage(name, monkeypatch):
    pytest.importorskip("reasoning_gym")
    monkeypatch.setitem(session.PRESETS, "smoke", TINY)
    s = session.Session(name, "smoke", difficulty=0)
    s.prepare()
    assert s.warm["steps"] > 0 and s.warm["source"] == "answers"
    result = s.run_stage(s.base_state, s.default_config(), seed=0)
    assert 0.0 <= result.tune_reward <= 1.0 and len(result.trace) == TINY.stage_steps + 2


def test_a_tokenizer_ends_at_end_of_sequence_when_answers_span_lines():
    pytest.importorskip("transformers")
    from loopwise.training.hf_policy import HFVocab
    from tests.training.test_hf_policy import CHARS, _tokenizer

    tokenizer = _tokenizer()
    by_newline, by_eos = HFVocab(tokenizer, len(CHARS)), HFVocab(tokenizer, len(CHARS), newline_ends=False)
    assert by_newline.decode(by_newline.encode("ab\nc")) == "ab"
    assert by_eos.model_end == tokenizer.eos_token_id
    assert by_eos.decode(by_eos.encode("ab\nc") + [by_eos.end] + by_eos.encode("d")) == "ab\nc"


class Growing:
    """Prompts that grow with the difficulty, as a reasoning-gym curriculum's do."""

    name, max_difficulty = "growing", 3

    def example(self, rng, difficulty):
        word = "".join(rng.choice("abc") for _ in range(rng.randint(3, 4 + 12 * difficulty)))
        return {"prompt": word + "=", "answer": word[0]}

    def score(self, example, completion):
        return float(completion == example.answer)

    def max_answer_length(self, difficulty):
        return 1


def test_a_harder_stage_trains_on_the_prompts_that_fit_the_policy(tmp_path, monkeypatch):
    monkeypatch.setitem(session.PRESETS, "smoke", TINY)
    path = tmp_path / "growing.py"
    path.write_text("import inspect\n" + inspect.getsource(Growing))
    s = session.Session(f"{path}:Growing", "smoke", difficulty=0)
    s.prepare()
    hard = s.default_config().model_copy(update={"difficulty": 3})
    assert max(len(e.prompt) for e in s.task.dataset("train", 60, 3)) > s.max_len  # some do not fit
    result = s.run_stage(s.base_state, hard, seed=0)
    assert len(result.trace) == TINY.stage_steps + 2


class RareLongAnswers:
    """Answers mostly of one character, now and then far longer than the task's stated bound."""

    name = "rare_long"

    def example(self, rng, difficulty):
        word = "".join(rng.choice("abc") for _ in range(4))
        return {"prompt": word + "=", "answer": word[0] * (60 if rng.random() < 0.05 else 1)}

    def score(self, example, completion):
        return float(completion == example.answer)

    def max_answer_length(self, difficulty):
        return 1


def test_the_warm_start_leaves_out_examples_longer_than_the_policy(tmp_path, monkeypatch):
    monkeypatch.setitem(session.PRESETS, "smoke", TINY)
    path = tmp_path / "rare_long.py"
    path.write_text(inspect.getsource(RareLongAnswers))
    s = session.Session(str(path), "smoke")
    assert any(len(e.answer) + len(e.prompt) >= s.max_len for e in s.task.dataset("train", TINY.pool_n, 0))
    s.prepare()
    assert s.warm["steps"] > 0 and s.base_state
