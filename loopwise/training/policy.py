"""Small causal transformers over a character vocabulary, trained from scratch: the policies the
training engine searches schedules for (0.1-20M parameters; no usable tiny weights exist on PyPI,
FACTS.md section 8).

A :class:`Vocab` is the characters of the task (its alphabet, or those of a sample of its examples,
:func:`~loopwise.training.tasks.task_characters`) plus special tokens: padding, the end of a
completion and, for characters the sample missed, an unknown token. Prompts are left-padded so that every row of a batch generates at the same position;
position ids count from each row's first real token, so padding changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from loopwise.errors import UserError

PAD, END, UNK = "\x00", "\n", "\ufffd"


class Vocab:
    """Characters <-> token ids: padding is 0, the end of a completion is 1, then the alphabet's
    characters in sorted order, then (``unk=True``) the unknown token, which every character
    outside the alphabet encodes to and which decodes to ``"\\ufffd"``.

    The end token is no character: a ``"\\n"`` in the alphabet is a token of its own, so answers may
    span lines; without one, ``"\\n"`` encodes to the end token."""

    def __init__(self, alphabet: str, unk: bool = False) -> None:
        chars = sorted(set(alphabet) - {PAD})
        if not chars or chars == [END]:
            raise UserError("the task's alphabet is empty")
        self.itos = [PAD, END, *chars] + ([UNK] if unk else [])
        # a "\n" of the alphabet comes after the end token's entry, so it keeps its own id
        self.stoi = {c: i for i, c in enumerate(self.itos[:2 + len(chars)])}
        self.pad, self.end = 0, 1
        self.unk = len(self.itos) - 1 if unk else None

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        if self.unk is not None:
            return [self.stoi.get(c, self.unk) for c in text]
        try:
            return [self.stoi[c] for c in text]
        except KeyError as exc:
            raise UserError(f"character {exc.args[0]!r} is not in the task's alphabet") from None

    def encode_prompt(self, text: str) -> list[int]:
        """A task's prompt as the policy reads it: its characters."""
        return self.encode(text)

    def decode(self, ids) -> str:
        """The text of ``ids`` up to (not including) the first end token; padding is skipped."""
        return "".join(self.itos[i] for i in completion_ids(ids, self.end, self.pad))


def completion_ids(ids, end: int, pad: int) -> list[int]:
    """The ids of a completion up to (not including) the first ``end``, without padding."""
    out = []
    for i in ids:
        i = int(i)
        if i == end:
            break
        if i != pad:
            out.append(i)
    return out


@dataclass(frozen=True)
class PolicySpec:
    """The architecture. ``presets`` gives the sizes the CLI's ``--preset`` names."""

    vocab_size: int
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    max_len: int = 96
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise UserError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")


PRESETS = {"smoke": dict(d_model=64, n_layers=2, n_heads=4), "small": dict(d_model=128, n_layers=4, n_heads=4),
           "full": dict(d_model=384, n_layers=8, n_heads=8)}


class _Block(nn.Module):
    def __init__(self, s: PolicySpec) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(s.d_model), nn.LayerNorm(s.d_model)
        self.qkv = nn.Linear(s.d_model, 3 * s.d_model)
        self.proj = nn.Linear(s.d_model, s.d_model)
        self.mlp = nn.Sequential(nn.Linear(s.d_model, 4 * s.d_model), nn.GELU(), nn.Linear(4 * s.d_model, s.d_model))
        self.n_heads, self.dropout = s.n_heads, s.dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Policy(nn.Module):
    """A decoder-only transformer (pre-norm, learned positions, tied embeddings)."""

    def __init__(self, spec: PolicySpec) -> None:
        super().__init__()
        self.spec = spec
        self.tok = nn.Embedding(spec.vocab_size, spec.d_model)
        self.pos = nn.Embedding(spec.max_len, spec.d_model)
        self.blocks = nn.ModuleList(_Block(spec) for _ in range(spec.n_layers))
        self.ln = nn.LayerNorm(spec.d_model)
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.head.weight = self.tok.weight
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):  # GPT-2's scaled residual init
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * spec.n_layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def parameters_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] of ``ids`` [B, T]; ``valid`` [B, T] marks real (non-padding) tokens, which
        are left-aligned after padding: position ids count from each row's first real token."""
        b, t = ids.shape
        if t > self.spec.max_len:
            raise UserError(f"sequence of {t} tokens is longer than the policy's {self.spec.max_len}")
        pos = (valid.long().cumsum(1) - 1).clamp(min=0)
        x = self.tok(ids) + self.pos(pos)
        causal = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
        mask = causal[None] & valid[:, None, :]
        # a padding row attends to itself so softmax never sees an all-masked row
        mask = mask | torch.eye(t, dtype=torch.bool, device=ids.device)[None]
        for block in self.blocks:
            x = block(x, mask[:, None])
        return self.head(self.ln(x))


def make_policy(vocab: Vocab, preset: str = "small", max_len: int = 96, **overrides) -> Policy:
    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
    return Policy(PolicySpec(vocab_size=len(vocab), max_len=max_len, **{**PRESETS[preset], **overrides}))


def left_pad(rows: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows as one left-padded batch and its validity mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
    ids = ids.to(device)
    return ids, ids != pad


@dataclass
class Samples:
    """Completions of a batch of prompts: ``ids`` [B, P + L] (prompt left-padded, then the
    completion, padded after its end token), ``prompt_width`` P, ``completion_mask`` [B, L] (the
    completion's tokens, the end token included), ``texts``, ``truncated`` (no end token within L)."""

    ids: torch.Tensor
    valid: torch.Tensor
    prompt_width: int
    completion_mask: torch.Tensor
    texts: list[str]
    truncated: list[bool]


@torch.no_grad()
def sample(policy: Policy, vocab: Vocab, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
           greedy: bool = False, generator: torch.Generator | None = None) -> Samples:
    """Samples a completion for every prompt (one row each; repeat a prompt for a group). A policy
    with ``decode_step(new_ids, valid, cache) -> (next logits, cache)`` (a KV cache) reads the prompt
    once and then each sampled token; otherwise every step runs the whole sequence."""
    device = next(policy.parameters()).device
    ids, valid = left_pad([vocab.encode_prompt(p) for p in prompts], vocab.pad, device)
    width = ids.shape[1]
    if width + max_new_tokens > policy.spec.max_len:
        raise UserError(f"prompt ({width}) + max_completion_length ({max_new_tokens}) exceeds the policy's "
                        f"{policy.spec.max_len} positions")
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    was_training = policy.training
    policy.eval()
    step = getattr(policy, "decode_step", None)
    cache, fresh = None, ids
    for _ in range(max_new_tokens):
        if step is not None:
            logits, cache = step(fresh, valid, cache)
        else:
            logits = policy(ids, valid)[:, -1, :]
        logits[:, vocab.pad] = -math.inf  # padding is never a token the policy may choose
        if bool(torch.isnan(logits).any()):  # on a GPU, sampling from NaN is a device assert
            policy.train(was_training)
            raise UserError("the policy's next-token logits hold NaN: its weights or its forward pass "
                            "overflowed (a lower learning rate, or fp32 instead of bf16, may avoid it)")
        if greedy:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits.float() / temperature, -1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, vocab.pad), nxt)
        fresh = nxt[:, None]
        ids = torch.cat([ids, fresh], 1)
        valid = torch.cat([valid, ~done[:, None]], 1)
        done = done | (nxt == vocab.end)
        if bool(done.all()):
            break
    policy.train(was_training)
    completion = ids[:, width:]
    mask = valid[:, width:]
    texts = [vocab.decode(row) for row in completion.tolist()]
    truncated = [(vocab.end not in row) for row in completion.tolist()]
    return Samples(ids, valid, width, mask, texts, truncated)


def token_logprobs(policy: Policy, s: Samples, temperature: float = 1.0, with_entropy: bool = False):
    """Per-token log-probabilities [B, L] of the completion tokens under ``policy`` at ``temperature``
    (and the per-token entropies of that distribution when asked)."""
    logits = policy(s.ids, s.valid)[:, s.prompt_width - 1:-1, :].float() / temperature
    logits[..., 0] = -math.inf  # padding: never sampled (see sample)
    logp = torch.log_softmax(logits, -1)
    target = s.ids[:, s.prompt_width:]
    out = logp.gather(-1, target[..., None]).squeeze(-1).masked_fill(~s.completion_mask, 0.0)
    if not with_entropy:
        return out
    p = logp.exp()
    entropy = -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)
    return out, entropy.masked_fill(~s.completion_mask, 0.0)
