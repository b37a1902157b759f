"""The warm start: supervised training of the base policy until its sampled pass rate enters a
target band, so that GRPO groups start with both solved and unsolved members.

What it learns from. Examples with reference answers: their answers (prompt, answer, end token;
the loss on the answer's tokens and the end token). A task without answers is *verifier-only*:
the warm start samples completions of training prompts, keeps those the verifier scores 1.0 and
learns from them, exactly the tokens the policy sampled (re-encoding their text could tokenize it
otherwise), sampling again at every check as the policy improves (rejection-sampling fine-tuning,
as in STaR, arXiv 2203.14465). When no sampled completion is accepted there is nothing to learn
from, and the warm start says so (:class:`~loopwise.errors.UserError`).

A freshly initialized character policy samples near-uniformly (its logits start within a few
tenths of each other), so before running it the warm start of a verifier-only task asks the
verifier about :data:`UPFRONT_DRAWS` completions drawn uniformly from the vocabulary, the way such
a policy samples: when it accepts none of them, a harvest of the policy's own samples (fewer, and
each costing a forward pass per token over the whole prompt) would find none either, and the
warm start stops with its error in the time the verifier takes. When it accepts one, the warm
start goes on as before.

Rows are counted in the tokens of the vocabulary in use (a character vocabulary or a Hugging Face
tokenizer), prompt and answer encoded apart as GRPO sees them.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence

import torch

from loopwise.errors import UserError
from loopwise.training.grpo import evaluate_lengths
from loopwise.training.policy import Policy, Vocab, completion_ids, left_pad, sample

HARVEST_PROMPTS = 64  # training prompts sampled from at each check of a verifier-only warm start
HARVEST_SAMPLES = 8  # completions per prompt
UPFRONT_DRAWS = 4096  # uniform draws the verifier scores before a fresh policy's warm start runs it


def warm_start(policy: Policy, vocab: Vocab, task, train: Sequence, check: Sequence, max_new_tokens: int, *,
               target: tuple[float, float] = (0.2, 0.8), max_steps: int = 2000, check_every: int = 50,
               lr: float = 1e-3, batch: int = 64, seed: int = 0,
               progress: Callable[[int, float], None] | None = None, fresh_policy: bool = False) -> dict:
    """Supervised training (see the module docstring) until the sampled pass rate (temperature 1)
    on ``check`` reaches ``target``'s low end, or ``max_steps``. Returns what happened: steps, pass
    rate, loss (None when no step was taken), history, ``source`` (``"answers"`` or ``"accepted
    samples"``) and, verifier-only, how many distinct accepted completions it learned from.
    ``fresh_policy``: the policy is a character policy as initialized, so a verifier-only task is
    first checked with uniform draws (:func:`uniform_accepted`).

    Raises:
        UserError: A bad target, or a verifier-only task none of whose sampled completions the
            verifier accepts.
    """
    lo, hi = target
    if not 0.0 <= lo < hi <= 1.0:
        raise UserError(f"warm-start target {target}: need 0 <= low < high <= 1")
    answered = [e for e in train if e.answer is not None]
    rng = random.Random(seed)
    # its own generator: the draws leave the warm start's batches as they were
    if not answered and fresh_policy and not uniform_accepted(vocab, task, train, max_new_tokens,
                                                              random.Random(f"upfront:{seed}")):
        raise _nothing_accepted(task, UPFRONT_DRAWS)
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    device = next(policy.parameters()).device
    history: list[tuple[int, float]] = []
    accepted: dict[tuple, tuple[list[int], list[int]]] = {}  # verifier-only: distinct (prompt, completion) ids
    rate, loss_value, step, skipped = 0.0, math.nan, 0, 0
    t0 = time.perf_counter()
    while True:
        if step % check_every == 0:
            rate, length = evaluate_lengths(policy, vocab, task, check, max_new_tokens, greedy=False, seed=seed + step)
            history.append((step, rate))
            if progress is not None:
                progress(step, rate)
            if rate >= lo or step >= max_steps:
                break
            if not answered:
                tried = harvest(policy, vocab, task, train, max_new_tokens, rng, accepted, seed=seed + step)
                if not accepted:
                    raise _nothing_accepted(task, tried)
        if answered:
            chunk = [answered[rng.randrange(len(answered))] for _ in range(batch)]
            pairs = [(vocab.encode_prompt(e.prompt), vocab.encode(e.answer)) for e in chunk]
        else:
            pool = list(accepted.values())
            pairs = [pool[rng.randrange(len(pool))] for _ in range(batch)]
        ids, valid, answer = rows_batch(vocab, pairs, device)
        policy.train()
        logits = policy(ids[:, :-1], valid[:, :-1])
        target_ids, target_mask = ids[:, 1:], answer[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target_ids.reshape(-1),
                                                 reduction="none").view_as(target_ids)
        loss = (loss * target_mask).sum() / target_mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        step += 1
        if not (torch.isfinite(loss) and torch.isfinite(norm)):
            # an overflow (reduced precision): the step would write NaN into every weight
            opt.zero_grad(set_to_none=True)
            skipped += 1
            continue
        opt.step()
        loss_value = float(loss.detach())
    # no step taken (the first check was in the target): no loss, and None where NaN would be (the
    # run store keeps strict JSON)
    # length: the last check's mean completion length, what a token budget expects a completion of
    # the base to cost
    out = {"steps": step, "pass_rate": rate, "length": length, "in_target": lo <= rate <= hi,
           "loss": loss_value if math.isfinite(loss_value) else None, "nonfinite_steps": skipped,
           "history": history, "seconds": time.perf_counter() - t0,
           "source": "answers" if answered else "accepted samples"}
    if not answered:
        out["accepted"] = len(accepted)
    return out


def _nothing_accepted(task, tried: int) -> UserError:
    return UserError(f"{task.name}: the warm start needs reference answers or completions the verifier accepts: the "
                     f"task gives no answers and none of {tried} sampled completions scored 1.0 (give answers, an "
                     "easier --difficulty, or a --policy that solves some)")


def uniform_accepted(vocab: Vocab, task, train: Sequence, max_new_tokens: int, rng: random.Random,
                     draws: int = UPFRONT_DRAWS) -> bool:
    """Whether the verifier accepts (scores 1.0) any of ``draws`` completions drawn as a fresh
    policy samples them: each token uniform over the vocabulary without padding, up to the end
    token or ``max_new_tokens``, for training examples taken in turn. Stops at the first accepted."""
    tokens = [i for i in range(len(vocab)) if i != vocab.pad]
    for i in range(draws):
        e = train[i % len(train)]
        ids = [rng.choice(tokens) for _ in range(max_new_tokens)]
        if task.score(e, vocab.decode(ids)) >= 1.0:
            return True
    return False


@torch.no_grad()
def harvest(policy: Policy, vocab: Vocab, task, train: Sequence, max_new_tokens: int, rng: random.Random,
            accepted: dict, *, seed: int = 0) -> int:
    """Samples :data:`HARVEST_SAMPLES` completions (temperature 1) for each of up to
    :data:`HARVEST_PROMPTS` training examples and adds those the verifier scores 1.0 to ``accepted``
    as (prompt ids, completion ids), the sampled ids themselves. Returns how many it sampled."""
    chosen = [train[rng.randrange(len(train))] for _ in range(min(HARVEST_PROMPTS, len(train)))]
    rows = [e for e in chosen for _ in range(HARVEST_SAMPLES)]
    generator = torch.Generator(device=next(policy.parameters()).device)
    generator.manual_seed(seed)
    for i in range(0, len(rows), 256):
        part = rows[i:i + 256]
        s = sample(policy, vocab, [e.prompt for e in part], max_new_tokens, generator=generator)
        for e, text, row in zip(part, s.texts, s.ids[:, s.prompt_width:].tolist()):
            if task.score(e, text) >= 1.0:
                prompt, completion = vocab.encode_prompt(e.prompt), completion_ids(row, vocab.end, vocab.pad)
                accepted.setdefault((tuple(prompt), tuple(completion)), (prompt, completion))
    return len(rows)


def supervised_batch(vocab: Vocab, examples: Sequence, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of prompt, reference answer and end token (see :func:`rows_batch`).

    Prompt and answer are encoded apart, as in GRPO, where the completion's tokens follow the
    prompt's; the mask counts the answer's tokens, which a subword tokenizer makes fewer than its
    characters."""
    return rows_batch(vocab, [(vocab.encode_prompt(e.prompt), vocab.encode(e.answer)) for e in examples], device)


def rows_batch(vocab: Vocab, pairs: Sequence[tuple[list[int], list[int]]], device
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of (prompt ids, answer ids) followed by the end token, left-padded: ids, validity, and
    the answer mask (the answer's tokens and the end token, where the warm start's loss is taken)."""
    answers = [list(a) + [vocab.end] for _, a in pairs]
    ids, valid = left_pad([list(p) + a for (p, _), a in zip(pairs, answers)], vocab.pad, device)
    width = ids.shape[1]
    answer = torch.zeros_like(ids, dtype=torch.bool)
    for i, a in enumerate(answers):
        answer[i, width - len(a):] = True
    return ids, valid, answer
