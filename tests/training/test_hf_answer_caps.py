"""A Hugging Face policy's completion caps count its tokens: a task's answer bound is in
characters, and a byte-level BPE spends two tokens on an accented letter, so the evaluation, the
greedy probe and the default stage must leave room for the longest reference answer in tokens."""

from __future__ import annotations

import pytest
import torch

TASK = '''
import random

LETTERS = "éèêëàâäôöûüç"


class Accented:
    """Copy the word after the colon."""

    name = "accented"
    max_difficulty = 1

    def example(self, rng, difficulty):
        word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 4 + difficulty)))
        return {"prompt": "copy:" + word + "=", "answer": word}

    def score(self, example, completion):
        return 1.0 if completion == example.answer else 0.0

    def max_answer_length(self, difficulty):
        return 4 + difficulty
'''


def byte_level_gpt2_on_disk(path):
    """A random one-layer GPT-2 with a byte-level BPE trained here on ASCII text only: every
    accented letter is two byte tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["copy:abc=abc", "copy:dcba=dcba"] * 10, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=len(tokenizer), n_positions=128,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from loopwise.training.session import Session

    folder = tmp_path_factory.mktemp("accented")
    (folder / "accented.py").write_text(TASK, encoding="utf-8")
    return Session(str(folder / "accented.py"), preset="lm-cpu", difficulty=0,
                   policy_path=byte_level_gpt2_on_disk(folder / "model"))


def longest_answer(session, examples):
    return max(len(session.vocab.encode(e.answer)) for e in examples)


def test_the_tokenizer_needs_more_tokens_than_the_task_has_characters(session):
    examples = session.tune + session.test + session.train_probe
    assert longest_answer(session, examples) > session.task.max_answer_length(0)


def test_the_default_stage_leaves_room_for_every_reference_answer_and_its_end(session):
    longest = longest_answer(session, session.tune + session.test + session.train_probe)
    assert session.default_config().max_completion_length >= longest + 1


def test_evaluation_and_probe_caps_hold_every_reference_answer(session, monkeypatch):
    from loopwise.training import session as module

    caps = []
    monkeypatch.setattr(module, "evaluate", lambda policy, vocab, task, examples, cap: caps.append((examples, cap)))
    session._measure(object(), b"weights", "test")
    for difficulty in (0, 1):  # the stage's own level, and a harder one the search may step to
        session._probe(difficulty)[0](object())
    for examples, cap in caps:
        assert cap >= longest_answer(session, examples) + 1
