"""A Hugging Face causal LM on disk as the GRPO policy: :class:`HFPolicy` and :class:`HFVocab` offer
what :mod:`loopwise.training.grpo` uses of :class:`~loopwise.training.policy.Policy` and
:class:`~loopwise.training.policy.Vocab`, so ``sample``, ``token_logprobs``, ``evaluate``,
``warm_start`` and :class:`~loopwise.training.grpo.GRPOTrainer` run on it unchanged.

Token ids. ``policy.token_logprobs`` forbids id 0 and ``policy.sample`` forbids ``vocab.pad``: both
mean "padding", so the padding id must be 0. The adapter therefore works in the tokenizer's ids with
two entries swapped, the chosen padding token and the token whose id is 0 (no swap when the padding
id is already 0). :class:`HFVocab` encodes and decodes in that order; :class:`HFPolicy` maps ids back
to the model's before the forward pass and reorders the logits after it.

End and padding. Loopwise tasks end a completion at ``"\\n"``: ``end`` is the tokenizer's one token for
``"\\n"``, or its end-of-sequence token when ``"\\n"`` takes more than one or the task's answers span
lines (``newline_ends=False``). Padding is masked out of
attention by ``valid`` everywhere, and sampling never chooses it, so the padding token must not be the
end token. It is the first of the tokenizer's pad, end-of-sequence and unknown tokens that is not the
end token; a model without one is refused (:class:`~loopwise.errors.UserError`). When padding is the
end-of-sequence token (``end`` being ``"\\n"``), the policy can never write end-of-sequence, which the
tasks do not need. Prompt and answer texts must not encode to the padding token (checked).

transformers loads lazily: importing this module costs nothing.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
from torch import nn

from loopwise.errors import UserError
from loopwise.training.policy import completion_ids

DEFAULT_MAX_LEN = 2048  # when the model's config names no max_position_embeddings


class HFVocab:
    """A tokenizer behind the :class:`~loopwise.training.policy.Vocab` interface (see the module
    docstring for the id order, ``end`` and ``pad``). ``size`` is the model's logits width."""

    def __init__(self, tokenizer, size: int, newline_ends: bool = True) -> None:
        self.tokenizer, self.size = tokenizer, size
        newline = tokenizer.encode("\n", add_special_tokens=False)
        eos = tokenizer.eos_token_id
        model_end = newline[0] if len(newline) == 1 and newline_ends else eos
        if model_end is None:
            raise UserError("the tokenizer has no end-of-sequence token" if not newline_ends else
                            "the tokenizer has no single token for '\\n' and no end-of-sequence token")
        candidates = (tokenizer.pad_token_id, eos, tokenizer.unk_token_id)
        model_pad = next((i for i in candidates if i is not None and i != model_end), None)
        if model_pad is None:
            raise UserError("the model needs a padding token distinct from its end token "
                            f"(id {model_end}): give its tokenizer a pad or unk token")
        self.model_pad, self.model_end = model_pad, model_end
        self.pad, self.end = 0, self._swap(model_end)

    def _swap(self, i: int) -> int:
        """Model id <-> loopwise id (the same transposition both ways)."""
        return 0 if i == self.model_pad else self.model_pad if i == 0 else i

    def order(self) -> torch.Tensor:
        """``order[loopwise_id]`` is the model's id: the reordering as an index tensor."""
        order = torch.arange(self.size)
        order[0], order[self.model_pad] = self.model_pad, 0
        return order

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if self.model_pad in ids:
            raise UserError(f"text {text[:40]!r} encodes to the padding token (id {self.model_pad})")
        return [self._swap(i) for i in ids]

    def decode(self, ids) -> str:
        """The text of ``ids`` up to (not including) the first end token; padding is skipped."""
        kept = [self._swap(i) for i in completion_ids(ids, self.end, self.pad)]
        return self.tokenizer.decode(kept, skip_special_tokens=False, clean_up_tokenization_spaces=False)


@dataclass(frozen=True)
class HFPolicySpec:
    """What the trainer reads of a policy's architecture."""

    vocab_size: int
    max_len: int


class HFPolicy(nn.Module):
    """A causal LM as a :class:`~loopwise.training.policy.Policy`: ``forward(ids, valid)`` gives logits
    [B, T, V] in :class:`HFVocab`'s id order, with left padding masked and position ids counted from
    each row's first real token, as in ``policy.py``. Logits of ids the tokenizer does not know (a
    model's embedding table is often padded past the tokenizer) are -inf, so they are never sampled."""

    def __init__(self, model: nn.Module, vocab: HFVocab, max_len: int) -> None:
        super().__init__()
        self.model = model
        self.spec = HFPolicySpec(vocab_size=len(vocab), max_len=max_len)
        self.register_buffer("order", vocab.order(), persistent=False)
        known = len(vocab.tokenizer)
        self.register_buffer("unknown", torch.arange(len(vocab)) >= known, persistent=False)

    def forward(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        if t > self.spec.max_len:
            raise UserError(f"sequence of {t} tokens is longer than the policy's {self.spec.max_len}")
        pos = (valid.long().cumsum(1) - 1).clamp(min=0)
        out = self.model(input_ids=self.order[ids], attention_mask=valid.long(), position_ids=pos, use_cache=False)
        logits = out.logits.masked_fill(self.unknown, -math.inf)
        return logits.index_select(-1, self.order)


def load_hf_policy(path: str, device="cpu", max_len: int | None = None,
                   newline_ends: bool = True) -> tuple[HFPolicy, HFVocab]:
    """The causal LM and tokenizer saved in the folder ``path`` (no network), as a policy on
    ``device`` and its vocabulary. ``max_len`` defaults to the config's ``max_position_embeddings``;
    ``newline_ends=False`` ends completions at end-of-sequence (for answers that span lines)."""
    if not os.path.isdir(path):
        raise UserError(f"model {path}: no such folder")
    try:
        import transformers
    except ImportError:
        raise UserError("loading a Hugging Face model needs transformers: pip install transformers") from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot use
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UserError(f"model {path}: not a usable Hugging Face causal LM ({type(exc).__name__}: {reason})") from None
    head = model.get_output_embeddings()
    size = head.weight.shape[0] if head is not None else model.config.vocab_size
    if len(tokenizer) > size:
        raise UserError(f"model {path}: its tokenizer has {len(tokenizer)} tokens, its model only {size}")
    vocab = HFVocab(tokenizer, size, newline_ends)
    if max_len is None:
        max_len = getattr(model.config, "max_position_embeddings", None) or DEFAULT_MAX_LEN
    return HFPolicy(model, vocab, max_len).to(device), vocab
