"""GRPO on plain torch: one trainer per stage, started from its parent's weights.

Per step: ``prompts_per_step`` training prompts, ``num_generations`` sampled completions each (at
``temperature``, cut at ``max_completion_length``), rewards from the task's verifier, advantages
normalized within each group (``(r - mean) / (std + 1e-4)``, TRL's ``scale_rewards="group"``), then
``num_iterations`` updates on that batch with the token-level clipped objective (DAPO's
normalization: the sum over all completion tokens of the batch divided by their count) with the
asymmetric clip ``[1 - epsilon, 1 + epsilon_high]``, an optional k3 KL term to a reference policy
weighted by ``beta``, an optional entropy bonus, and gradient clipping. The reference is the weights
the caller names (the schedule's initial policy, see ``StageConfig.kl_reference``) or else the
weights the stage started from. Its KL is logged at every step when ``beta`` > 0 and on the probe's
steps (below) when ``beta`` is 0 (one forward pass without gradients each), so a drift is seen
before a KL term exists. The policy runs in eval mode throughout a step (gradients still
flow; dropout does not), so the first update's ratio is exactly 1 (the batch was sampled by the
same weights); the clip acts from the second on.

An optional *probe* (a callable scoring the policy, e.g. greedy reward on a few held-out prompts)
runs after every ``probe_every``-th update and after the stage's last, and its value is logged as
``greedy_reward`` (with ``greedy_prompts``, the probe's size, when given: what its reward can
resolve): the diagnosis reads progress and difficulty off it rather than off the sampled reward,
which moves with the temperature. It reads the policy only, so training is the same with or
without it.

Metrics per step carry TRL's names (:mod:`loopwise.training.metrics`). A trainer's whole state
(policy, optimizer, both random generators, step, trace) is one checkpoint file, written atomically,
from which a stage resumes bit for bit.
"""

from __future__ import annotations

import copy
import math
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from loopwise.core.files import replacing
from loopwise.errors import UserError
from loopwise.training import metrics as M
from loopwise.training.config import StageConfig
from loopwise.training.policy import Policy, Samples, Vocab, sample, token_logprobs

ADV_EPS = 1e-4  # TRL's epsilon in the group normalization


def sample_groups(policy: Policy, vocab: Vocab, task, examples: Sequence, config: StageConfig,
                  generator: torch.Generator) -> tuple[Samples, torch.Tensor]:
    """``config.num_generations`` completions for each of ``examples`` (at the config's temperature
    and length cap) and their rewards, one row per example (a group)."""
    n = config.num_generations
    s = sample(policy, vocab, [e.prompt for e in examples for _ in range(n)], config.max_completion_length,
               config.temperature, generator=generator)
    scores = [task.score(examples[i // n], text) for i, text in enumerate(s.texts)]
    bad = next((i for i, r in enumerate(scores) if not math.isfinite(r)), None)
    if bad is not None:
        raise UserError(f"task {getattr(task, 'name', type(task).__name__)!r} scored {scores[bad]} for the "
                        f"completion {s.texts[bad][:60]!r}: a reward must be a finite number")
    rewards = torch.tensor(scores, dtype=torch.float32, device=next(policy.parameters()).device)
    return s, rewards.view(len(examples), n)


def uniform_groups(groups: torch.Tensor) -> torch.Tensor:
    """Per group (row), whether all its rewards are equal: its advantages are all 0, so it gives the
    policy-gradient term nothing to learn from."""
    return groups.std(1) < 1e-6


class GRPOTrainer:
    """One stage of GRPO on ``task`` with ``config``, from ``policy``'s current weights (which it
    trains in place). ``pool`` is the stage's training examples (the task's ``train`` split at the
    stage's difficulty)."""

    def __init__(self, policy: Policy, vocab: Vocab, task, config: StageConfig, pool: Sequence, *, seed: int = 0,
                 reference: dict | None = None, probe: Callable[[Policy], float] | None = None,
                 probe_every: int = 1, probe_prompts: int | None = None) -> None:
        if not pool:
            raise UserError("the stage has no training examples")
        if probe_every < 1:
            raise ValueError(f"probe_every must be at least 1, got {probe_every}")
        self.policy, self.vocab, self.task, self.cfg, self.pool = policy, vocab, task, config, list(pool)
        self.probe, self.probe_every, self.probe_prompts = probe, probe_every, probe_prompts
        self.device = next(policy.parameters()).device
        # the KL anchor: ``reference`` (a state dict, e.g. the schedule's initial weights) or the stage's start
        self.reference: Policy = copy.deepcopy(policy).eval()
        if reference is not None:
            self.reference.load_state_dict(reference)
        for p in self.reference.parameters():
            p.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate, betas=(0.9, 0.99),
                                           weight_decay=0.0)
        self.rng = random.Random(seed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.step_count = 0
        self.trace: list[dict] = []

    # -- one step ----------------------------------------------------------------------------
    def step(self) -> dict:
        c = self.cfg
        examples = [self.pool[self.rng.randrange(len(self.pool))] for _ in range(c.prompts_per_step)]
        s, groups = sample_groups(self.policy, self.vocab, self.task, examples, c, self.generator)
        rewards = groups.reshape(-1)
        mean, std = groups.mean(1, keepdim=True), groups.std(1, keepdim=True)
        advantages = ((groups - mean) / (std + ADV_EPS)).reshape(-1, 1)
        mask = s.completion_mask.float()
        tokens = mask.sum().clamp(min=1.0)
        # eval mode while still taking gradients: no dropout, so the first update's ratio is exactly 1.
        # TRL zeroes nn.Dropout modules instead (disable_dropout); eval mode also covers dropout a
        # model applies as a float from its config (Llama's attention) and the tiny policy's, and
        # leaves the model's own settings alone for anything else that trains it
        self.policy.eval()
        with torch.no_grad():
            old = token_logprobs(self.policy, s, c.temperature)
            # KL is the loss's term when beta > 0, else a measurement taken on the probe's steps
            measured = c.beta > 0 or self._probe_step(self.step_count + 1)
            ref = token_logprobs(self.reference, s, c.temperature) if measured else None
        sums = {"loss": 0.0, "grad_norm": 0.0, "low": 0.0, "high": 0.0, "kl": 0.0}
        entropy, skipped = 0.0, 0
        for it in range(c.num_iterations):
            logp, ent = token_logprobs(self.policy, s, c.temperature, with_entropy=True)
            if it == 0:  # the sampling distribution's, before any update of the step
                entropy = float((ent.detach() * mask).sum() / tokens)
            ratio = torch.exp(logp - old)
            unclipped = ratio * advantages
            clipped = ratio.clamp(1 - c.epsilon, 1 + c.epsilon_high) * advantages
            per_token = -torch.minimum(unclipped, clipped)
            if ref is not None:
                delta = ref - logp
                kl = torch.exp(delta) - delta - 1  # k3: unbiased, non-negative
                if c.beta:
                    per_token = per_token + c.beta * kl
                kl_mean = float((kl.detach() * mask).sum() / tokens)
            if c.entropy_coef:
                per_token = per_token - c.entropy_coef * ent
            loss = (per_token * mask).sum() / tokens
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
            if not (torch.isfinite(loss) and torch.isfinite(norm)):
                # a non-finite loss or gradient (an overflow in reduced precision) would write NaN
                # into every weight: the update is skipped, counted, and left out of the averages
                self.optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            self.optimizer.step()
            with torch.no_grad():
                low = ((ratio < 1 - c.epsilon) & (advantages < 0)).float()
                high = ((ratio > 1 + c.epsilon_high) & (advantages > 0)).float()
                sums["low"] += float((low * mask).sum() / tokens)
                sums["high"] += float((high * mask).sum() / tokens)
            sums["loss"] += float(loss.detach())
            sums["grad_norm"] += float(norm)
            if ref is not None:
                sums["kl"] += kl_mean
        n = max(c.num_iterations - skipped, 1)
        lengths = mask.sum(1)
        ended = [not t for t in s.truncated]
        terminated = [float(lengths[i]) for i, ok in enumerate(ended) if ok]
        self.step_count += 1
        row = {
            M.STEP: self.step_count, M.REWARD: float(rewards.mean()), M.REWARD_STD: float(std.mean()),
            M.FRAC_ZERO_STD: float(uniform_groups(groups).float().mean()), M.ENTROPY: entropy,
            M.MAX_LENGTH: float(lengths.max()),
            M.CLIP_LOW: sums["low"] / n, M.CLIP_HIGH: sums["high"] / n, M.CLIP_REGION: (sums["low"] + sums["high"]) / n,
            M.LENGTH: float(lengths.mean()), M.CLIPPED: sum(s.truncated) / len(s.truncated),
            M.TERMINATED_LENGTH: (sum(terminated) / len(terminated)) if terminated else 0.0,
            M.SAMPLES: len(s.texts), M.TOKENS: int(mask.sum()),
            M.LR: c.learning_rate, M.SKIPPED_UPDATES: skipped,
        }
        if skipped < c.num_iterations:
            row.update({M.GRAD_NORM: sums["grad_norm"] / n, M.LOSS: sums["loss"] / n})
        if ref is not None and skipped < c.num_iterations:
            row[M.KL] = sums["kl"] / n
        half = c.num_generations // 2
        if half >= 2:  # would half the group still carry a signal? each group's halves, measured apart
            halves = groups[:, :2 * half].reshape(-1, half)
            row[M.FRAC_ZERO_STD_HALF] = float(uniform_groups(halves).float().mean())
        if self.probe is not None and self._probe_step(self.step_count):
            row[M.GREEDY_REWARD] = float(self.probe(self.policy))
            if self.probe_prompts is not None:
                row[M.GREEDY_PROMPTS] = self.probe_prompts
        self.trace.append(row)
        return row

    def _probe_step(self, step: int) -> bool:
        """Whether step ``step`` (counted from 1) is probed: every ``probe_every``-th and the stage's last."""
        return step % self.probe_every == 0 or step == self.cfg.steps

    def run(self, steps: int | None = None, progress: Callable[[int, int, dict], None] | None = None,
            stop: Callable[[list[dict]], bool] | None = None) -> list[dict]:
        """``steps`` more steps (default: the rest of the stage's ``config.steps``); ``stop``, asked
        with the trace before each step, ends the run early when it says so."""
        total = self.cfg.steps if steps is None else self.step_count + steps
        while self.step_count < total and not (stop is not None and stop(self.trace)):
            row = self.step()
            if progress is not None:
                progress(self.step_count, total, row)
        return self.trace

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": self.rng.getstate(), "generator": self.generator.get_state(), "step": self.step_count,
                "trace": list(self.trace), "config": self.cfg.model_dump(),
                "reference": self.reference.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state["config"] != self.cfg.model_dump():
            raise UserError("the checkpoint was written by a stage with another configuration")
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.setstate(state["rng"])
        self.generator.set_state(state["generator"])
        self.step_count, self.trace = state["step"], list(state["trace"])
        if state.get("reference") is not None:
            self.reference.load_state_dict(state["reference"])

    def save(self, path: str | os.PathLike) -> Path:
        return save_atomic(self.state_dict(), path)

    def load(self, path: str | os.PathLike) -> None:
        self.load_state_dict(load_checkpoint(path))


def save_atomic(obj, path: str | os.PathLike) -> Path:
    """torch.save through a temporary file and a rename: a crash leaves the old file or the new one."""
    path = Path(path)
    with replacing(path, durable=True) as tmp:
        torch.save(obj, tmp)
    return path


def load_checkpoint(path: str | os.PathLike) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path}: no such file")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file is the user's fault, not a bug
        raise UserError(f"checkpoint {path}: unreadable ({type(exc).__name__})") from None


# -- evaluation --------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(policy: Policy, vocab: Vocab, task, examples: Sequence, max_new_tokens: int, *, greedy: bool = True,
             temperature: float = 1.0, batch: int = 256, seed: int = 0) -> float:
    """Mean verifier score of the policy's completions for ``examples`` (greedy by default)."""
    return evaluate_lengths(policy, vocab, task, examples, max_new_tokens, greedy=greedy, temperature=temperature,
                            batch=batch, seed=seed)[0]


def evaluate_lengths(policy: Policy, vocab: Vocab, task, examples: Sequence, max_new_tokens: int, *,
                     greedy: bool = True, temperature: float = 1.0, batch: int = 256,
                     seed: int = 0) -> tuple[float, float]:
    """:func:`evaluate`'s mean score, and the completions' mean length in tokens (end token included)."""
    if not examples:
        raise UserError("nothing to evaluate on")
    gen = torch.Generator(device=next(policy.parameters()).device)
    gen.manual_seed(seed)
    total, tokens = 0.0, 0
    for i in range(0, len(examples), batch):
        chunk = examples[i:i + batch]
        s = sample(policy, vocab, [e.prompt for e in chunk], max_new_tokens, temperature, greedy=greedy, generator=gen)
        total += sum(task.score(e, t) for e, t in zip(chunk, s.texts))
        tokens += int(s.completion_mask.sum())
    return total / len(examples), tokens / len(examples)
