"""Left padding through a Hugging Face policy's attention, on a tiny random Llama (SmolLM2's
architecture) in bf16: every code path the engine runs (the forward pass, sampling with the KV cache,
GRPO's log-probabilities and update, the warm start's loss) stays finite and padding changes no
real position, also under attention that returns NaN for a query row with no key to attend to
(softmax over nothing is 0/0: GPU kernels without a special case for it do so, the CPU's does not).
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from loopwise.training import metrics as M
from loopwise.training.config import StageConfig
from loopwise.training.grpo import GRPOTrainer
from loopwise.training.hf_policy import HFPolicy, HFVocab, attention_mask
from loopwise.training.policy import sample, token_logprobs
from loopwise.training.warm import warm_start
from tests.training.test_grpo import Reverse
from tests.training.test_hf_policy import CHARS, EXTRA, _tokenizer


def strict_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False):
    """Scaled dot-product attention by its formula alone: a masked score is -inf, a row of them
    gives NaN weights, and a masked key's value still enters the product with weight 0. Records
    whether the cuDNN kernels were allowed at the call."""
    strict_attention.cudnn_allowed.append(torch.backends.cuda.cudnn_sdp_enabled())
    if enable_gqa:
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, -3), value.repeat_interleave(repeat, -3)
    scores = query.float() @ key.float().transpose(-2, -1) * (scale or 1 / math.sqrt(query.shape[-1]))
    rows, cols = scores.shape[-2:]
    if is_causal:
        attn_mask = torch.ones(rows, cols, dtype=torch.bool, device=query.device).tril(cols - rows)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else scores + attn_mask
    return (torch.softmax(scores, -1) @ value.float()).to(query.dtype)


strict_attention.cudnn_allowed = []


@pytest.fixture
def strict(monkeypatch):
    """transformers' ``sdpa`` attention calls :func:`strict_attention` instead of torch's."""
    strict_attention.cudnn_allowed.clear()
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", strict_attention)
    return strict_attention


def _llama(implementation: str = "sdpa") -> tuple[HFPolicy, HFVocab]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(CHARS) + EXTRA, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=0, pad_token_id=1, attn_implementation=implementation)
    tokenizer = _tokenizer()
    vocab = HFVocab(tokenizer, config.vocab_size)
    return HFPolicy(LlamaForCausalLM(config).to(torch.bfloat16), vocab, 64).eval(), vocab


def test_a_padding_query_sees_itself_and_a_real_one_the_valid_keys_up_to_itself():
    valid = torch.tensor([[False, False, True, True], [True, True, True, True]])
    allowed = attention_mask(valid, 4)[:, 0]
    assert allowed[0].tolist() == [[True, False, False, False], [False, True, False, False],
                                   [False, False, True, False], [False, False, True, True]]
    assert torch.equal(allowed[1], torch.ones(4, 4, dtype=torch.bool).tril())
    # the last query alone (a decoding step): the same row
    assert torch.equal(attention_mask(valid, 1)[:, 0, 0], allowed[:, 3])


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_left_padding_changes_no_real_logit_and_leaves_none_nan(implementation, strict):
    policy, vocab = _llama(implementation)
    alone = torch.tensor([vocab.encode("ab=")])
    batch = torch.tensor([[vocab.pad] * 3 + vocab.encode("ab="), vocab.encode("abcdab")])
    with torch.no_grad():
        logits_alone, logits_batch = policy(alone, alone != vocab.pad), policy(batch, batch != vocab.pad)
    known = logits_batch[..., :len(CHARS)]
    assert torch.isfinite(known).all()  # padding positions included
    assert torch.allclose(logits_alone[0], logits_batch[0, 3:], atol=1e-2)


def test_sampling_left_padded_prompts_with_the_kv_cache_matches_each_prompt_alone(strict):
    policy, vocab = _llama()
    prompts = ["a=", "abcd=", "dcb="]
    together = sample(policy, vocab, prompts, max_new_tokens=6, greedy=True)
    apart = [sample(policy, vocab, [p], max_new_tokens=6, greedy=True).texts[0] for p in prompts]
    assert together.texts == apart
    # the whole sequence at once gives the log-probabilities the cache sampled from
    logp = token_logprobs(policy, together)
    assert torch.isfinite(logp).all()


def test_grpo_and_the_warm_start_update_without_a_nonfinite_step(strict):
    policy, vocab = _llama()
    task = Reverse()
    rng = random.Random(0)
    pool = [task.example(rng) for _ in range(20)]
    # prompts of several lengths, so every batch is left-padded
    pool += [type(pool[0])(e.prompt[1:], e.answer[1:]) for e in pool[:10]]
    cfg = StageConfig(max_completion_length=5, num_generations=4, prompts_per_step=4, num_iterations=2,
                      beta=0.05, entropy_coef=0.01)
    row = GRPOTrainer(policy, vocab, task, cfg, pool, seed=0).step()
    assert row[M.SKIPPED_UPDATES] == 0 and math.isfinite(row[M.LOSS]) and math.isfinite(row[M.GRAD_NORM])
    warm = warm_start(policy, vocab, task, pool, pool[:4], 5, target=(0.99, 1.0), max_steps=2, check_every=2,
                      lr=1e-3, batch=8)
    assert warm["nonfinite_steps"] == 0 and warm["steps"] == 2 and math.isfinite(warm["loss"])
    assert all(torch.isfinite(p).all() for p in policy.parameters())


def test_the_policys_attention_never_runs_on_cudnn_kernels(strict):
    policy, vocab = _llama()
    ids = torch.tensor([vocab.encode("ab=")])
    with torch.no_grad():
        policy(ids, ids != vocab.pad)
        policy.decode_step(ids, ids != vocab.pad)
    assert strict.cudnn_allowed and not any(strict.cudnn_allowed)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # as it was, outside the policy


def test_the_gpu_check_script_tells_the_old_padding_mask_from_the_policys(strict, tmp_path):
    """bench/attention_nan_check.py under an attention without the empty-row special case: the
    model given the 2-D padding mask has NaN at real positions, the policy has none."""
    from bench_modules import bench_module

    check = bench_module("attention_nan_check")
    policy, vocab = _llama()
    ids, valid = check._batch(vocab, 24, torch.Generator().manual_seed(0))
    assert (~valid).any(1).sum() >= 4 and valid.all(1).any()
    found = {way: check._check(policy, way, ids, valid, ids[:, 1:]) for way in check.WAYS}
    assert found["padding_mask"]["real_logits_nan"] and found["padding_mask"]["nonfinite_grad_tensors"] > 0
    assert found["policy"] == {"real_logits_nan": False, "padding_logits_nan": False, "loss_finite": True,
                               "nonfinite_grad_tensors": 0, "grad_tensors": found["policy"]["grad_tensors"]}
