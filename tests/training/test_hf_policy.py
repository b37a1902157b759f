"""A Hugging Face causal LM on disk as the GRPO policy, with a tiny random GPT-2 and a character
tokenizer built offline: ids round-trip, padding changes no logit, sampling keeps policy.py's
contract, a GRPO step runs, and bad folders are one-line errors."""

from __future__ import annotations

import math
import random
import sys

import pytest
import torch

from loopwise.errors import UserError
from loopwise.training import metrics as M
from loopwise.training.config import StageConfig
from loopwise.training.grpo import GRPOTrainer
from loopwise.training.hf_policy import HFVocab, load_hf_policy
from loopwise.training.policy import sample, token_logprobs
from tests.training.test_grpo import Reverse

# the padding token is not id 0, so the adapter's id swap is exercised; 3 model ids have no token
CHARS = ["<eos>", "<pad>", "\n", *"abcd="]
EXTRA = 3


def tiny_gpt2_on_disk(path):
    """A random one-layer GPT-2 and a character tokenizer over the tasks' alphabet, saved at
    ``path`` as a Hugging Face model folder (what ``--policy PATH`` reads); returns ``path``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from loopwise.training.tasks import ALPHABET

    chars = ["<eos>", "<pad>", "\n", *ALPHABET]
    _tokenizer(chars=chars).save_pretrained(path)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=len(chars), n_positions=64,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(path)
    return path


def _tokenizer(pad: str | None = "<pad>", chars=CHARS):
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE({c: i for i, c in enumerate(chars)}, [], unk_token=None))
    tok.decoder = decoders.Fuse()  # characters join without spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token=pad)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    path = tmp_path_factory.mktemp("tiny_gpt2")
    _tokenizer().save_pretrained(path)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=len(CHARS) + EXTRA, n_positions=64,
                        bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(config).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def loaded(model_dir):
    return load_hf_policy(model_dir)


def test_loads_with_the_model_sizes_and_newline_as_end(loaded, model_dir):
    policy, vocab = loaded
    assert policy.spec.max_len == 64 and policy.spec.vocab_size == len(vocab) == len(CHARS) + EXTRA
    assert vocab.pad == 0 and vocab.model_pad == 1 and vocab.model_end == 2 and vocab.end == 2
    assert load_hf_policy(model_dir, max_len=16)[0].spec.max_len == 16


def test_encode_decode_round_trip_cut_at_end(loaded):
    _, vocab = loaded
    ids = vocab.encode("ab=dc")
    assert vocab.pad not in ids and vocab.decode(ids) == "ab=dc"
    assert vocab.decode([vocab.pad] + ids + [vocab.end] + vocab.encode("a")) == "ab=dc"
    eos = vocab.encode("<eos>")  # id 0 in the tokenizer, swapped with padding
    assert eos == [1] and vocab.decode(eos) == "<eos>"
    with pytest.raises(UserError, match="padding token"):
        vocab.encode("a<pad>")


def test_left_padding_changes_no_logit(loaded):
    policy, vocab = loaded
    policy.eval()
    alone = torch.tensor([vocab.encode("ab=")])
    batch = torch.tensor([[vocab.pad] * 3 + vocab.encode("ab="), vocab.encode("abcdab")])
    with torch.no_grad():
        logits_alone = policy(alone, alone != vocab.pad)
        logits_batch = policy(batch, batch != vocab.pad)
    assert torch.isfinite(logits_batch[:, :, :len(CHARS)]).all()
    assert torch.allclose(logits_alone[0], logits_batch[0, 3:], atol=1e-4)
    assert (logits_batch[..., len(CHARS):] == -math.inf).all()  # ids without a token


def test_sampling_keeps_the_policy_contract(loaded):
    policy, vocab = loaded
    s = sample(policy, vocab, ["ab=", "abcd="] * 4, max_new_tokens=5, generator=torch.Generator().manual_seed(0))
    assert s.prompt_width == 5 and s.ids.shape == (8, 5 + s.completion_mask.shape[1])
    for row, mask, text, cut in zip(s.ids[:, 5:].tolist(), s.completion_mask.tolist(), s.texts, s.truncated):
        end = row.index(vocab.end) if vocab.end in row else None
        assert cut == (end is None)
        assert sum(mask) == (len(row) if end is None else end + 1)
        assert text == vocab.decode(row) and all(i < len(CHARS) for i in row)
    logp = token_logprobs(policy, s)
    assert torch.isfinite(logp).all() and (logp[~s.completion_mask] == 0).all()
    assert (logp[s.completion_mask] < 0).all()


def test_a_grpo_step_runs_with_finite_metrics(model_dir):
    policy, vocab = load_hf_policy(model_dir)  # its own copy: the step trains it in place
    task = Reverse()
    rng = random.Random(0)
    pool = [task.example(rng) for _ in range(20)]
    cfg = StageConfig(max_completion_length=5, num_generations=4, prompts_per_step=2, beta=0.05, entropy_coef=0.01)
    row = GRPOTrainer(policy, vocab, task, cfg, pool, seed=0).step()
    for key in (M.REWARD, M.ENTROPY, M.KL, M.LOSS, M.GRAD_NORM, M.LENGTH):
        assert math.isfinite(row[key]), key
    assert all(torch.isfinite(p).all() for p in policy.parameters())


def test_padding_must_differ_from_end():
    no_pad = _tokenizer(pad=None, chars=["<eos>", *"ab"])  # no "\n" token: end is <eos>, nothing left to pad
    with pytest.raises(UserError, match="padding token distinct from its end token"):
        HFVocab(no_pad, 3)
    eos_pads = HFVocab(_tokenizer(pad=None), len(CHARS))  # "\n" ends, <eos> pads
    assert (eos_pads.model_pad, eos_pads.model_end, eos_pads.pad) == (0, 2, 0)


def test_bad_folders_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="no such folder") as missing:
        load_hf_policy(str(tmp_path / "nope"))
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(UserError, match="not a usable Hugging Face causal LM") as empty:
        load_hf_policy(str(tmp_path))
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UserError, match="needs transformers") as absent:
        load_hf_policy(str(tmp_path))
    for err in (missing, empty, absent):
        assert "\n" not in str(err.value)


def test_a_comparison_runs_on_a_model_from_disk(tmp_path, monkeypatch):
    """`loopwise training ... --policy PATH`: the session trains and evaluates the user's model."""
    from loopwise.training import session
    from loopwise.training.run import Settings, TrainingRun

    path = tiny_gpt2_on_disk(tmp_path / "model")
    monkeypatch.setitem(session.PRESETS, "smoke", session.Preset("smoke", stage_steps=2, prompts_per_step=2,
                                                               num_generations=2, eval_n=8, pool_n=40,
                                                               warm_max_steps=4, warm_check_every=2, probe_n=4))
    run = TrainingRun.start(Settings("sorting", ("staged",), budget=2, depth=1, difficulty=0, device="cpu",
                                     policy_path=str(path)), str(tmp_path / "runs"))
    assert run.session.max_len <= 64 and type(run.session.new_policy()).__name__ == "HFPolicy"
    [result] = run.run().values()
    run.close()
    assert result["stages_used"] == 2 and 0.0 <= result["test_reward"] <= 1.0
    with pytest.raises(UserError):
        TrainingRun.start(Settings("sorting", policy_path=str(tmp_path / "nope")), str(tmp_path / "runs"))


def test_the_first_update_sees_the_sampling_weights_through_dropout(model_dir, monkeypatch):
    """GPT-2's config turns dropout on (0.1 everywhere); the first update's ratio must still be 1."""
    from transformers import GPT2LMHeadModel

    from loopwise.training import grpo

    policy, vocab = load_hf_policy(model_dir)
    config = policy.model.config
    assert (config.resid_pdrop, config.embd_pdrop, config.attn_pdrop) == (0.1, 0.1, 0.1)
    assert isinstance(policy.model, GPT2LMHeadModel)
    calls, original = [], grpo.token_logprobs

    def recorded(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append((out[0] if isinstance(out, tuple) else out).detach().clone())
        return out

    monkeypatch.setattr(grpo, "token_logprobs", recorded)
    task = Reverse()
    rng = random.Random(0)
    pool = [task.example(rng) for _ in range(20)]
    cfg = StageConfig(max_completion_length=5, num_generations=4, prompts_per_step=2)
    trainer = GRPOTrainer(policy, vocab, task, cfg, pool, seed=0)
    policy.train()  # as after a warm start
    trainer.step()
    old, new = calls[0], calls[1]  # the sampling weights' log-probabilities, then the first update's
    assert torch.allclose(torch.exp(new - old), torch.ones_like(old), atol=1e-6, rtol=0)


def _bpe_tokenizer():
    """A BPE trained here on a few sums, so that answers take fewer tokens than characters."""
    from tokenizers import Tokenizer, decoders, models, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.decoder = decoders.Fuse()
    corpus = ["12+34=46", "46+12=58", "100+23=123", "58+46=104", "123+100=223"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=40, special_tokens=["<eos>", "<pad>", "\n"],
                                                        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")


def test_the_warm_start_learns_exactly_the_answer_tokens():
    from loopwise.training.warm import supervised_batch
    from tests.training.test_grpo import Ex

    tokenizer = _bpe_tokenizer()
    vocab = HFVocab(tokenizer, len(tokenizer))
    examples = [Ex("12+34=", "46"), Ex("100+23=", "123"), Ex("58+46=", "104"), Ex("1+2=", "3")]
    answers = [vocab.encode(e.answer) for e in examples]
    assert any(len(a) != len(e.answer) for a, e in zip(answers, examples))  # characters are not tokens
    ids, valid, mask = supervised_batch(vocab, examples, "cpu")
    for row, ok, learned, e, answer in zip(ids.tolist(), valid.tolist(), mask.tolist(), examples, answers):
        real = [i for i, v in zip(row, ok) if v]
        assert real == vocab.encode(e.prompt) + answer + [vocab.end]
        assert [i for i, m in zip(row, learned) if m] == answer + [vocab.end]
        assert sum(learned) == len(answer) + 1
