"""The session every training method shares, and what a stage and a schedule are.

A :class:`Session` fixes the task, the base policy (a small transformer warm-started by supervised
training until its sampled pass rate reaches 0.2 or the preset's step limit), the difficulty held-out reward is measured
at, the tuning set (selection) and the test set (reporting). A *stage* trains a copy of a parent's
weights with one :class:`~loopwise.training.config.StageConfig` (a fresh trainer: new optimizer,
KL reference = the base policy or the stage's starting weights, as ``kl_reference`` says) and is
scored by greedy held-out reward on the tuning set; a :class:`Schedule` is a method's chosen
sequence of stages.

During a stage the trainer probes greedy reward on the first ``probe_n`` tune prompts at the
stage's difficulty (the tune set's own first prompts when the stage trains at the session's
difficulty) every ``ceil(steps / PROBE_POINTS)`` updates and after the last (8 probes in a smoke
stage, 6 in a ``cpu`` one). The cost of a probe: ``probe_n`` greedy completions (no gradient),
against the ``prompts_per_step x num_generations`` sampled completions, the ``1 + num_iterations``
forward passes over them and the ``num_iterations`` backward passes that every step makes (at the
``cpu`` preset 32 greedy completions every other step against 64 sampled ones a step), plus, at
``beta`` 0, the reference's forward pass for the KL measured on the probe's steps. Like the
held-out evaluations at stage ends, probes are not counted in a method's budget of generated
samples. The tree's *signal* probes (:meth:`Session.probe_signal`: a stage's first step's
sampling, topped up with further prompts where a verdict needs them, to see whether the stage's
groups would carry a reward signal before it is trained) are counted: the stage they admit does not
pay for its first step again.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from loopwise.errors import UserError
from loopwise.training.compute import Allowance, Compute, StageTally, stage_compute
from loopwise.training.config import StageConfig
from loopwise.training.grpo import GRPOTrainer, evaluate
from loopwise.training.learning_signal import GroupTally, SignalProbe, probe_groups, stage_groups
from loopwise.training.policy import Vocab, make_policy
from loopwise.training.warm import warm_start

if TYPE_CHECKING:
    from loopwise.training.transitions import Bounds

EPS = 0.01  # added to rewards before they are compared as ratios (a reward can be 0)
FIT_SAMPLE = 200  # training prompts whose shortest says whether a config's completions fit (trainable)
PROBE_POINTS = 8  # greedy probes per stage (at most): the diagnosis' trend needs 6 (two 3-point windows)
KL_REFERENCES = ("initial", "stage")
RANDOM_LEARNING_RATE = (1e-4, 1e-3)  # the baselines' learning-rate range for the character policies


@dataclass(frozen=True)
class Preset:
    policy: str
    stage_steps: int
    prompts_per_step: int
    num_generations: int
    eval_n: int
    pool_n: int
    warm_max_steps: int
    warm_check_every: int
    probe_n: int  # tune prompts the greedy probe scores during a stage
    # the default config's learning rate; None: 1e-4 (5e-5 for the full policy). A preset that names
    # one scales the baselines' search range and the tree's bounds with it (a pretrained model
    # fine-tunes at learning rates far below a from-scratch one's)
    learning_rate: float | None = None
    warm_learning_rate: float = 1e-3  # the warm start's supervised learning rate


PRESETS = {
    # a pipeline check: stages just long enough for the diagnosis (trace_stats.MIN_STEPS), so the tree's
    # expansions past the first read findings
    "smoke": Preset("smoke", stage_steps=8, prompts_per_step=4, num_generations=4, eval_n=48, pool_n=400,
                    warm_max_steps=150, warm_check_every=25, probe_n=16),
    # a CPU-sized comparison: stages long enough for the diagnosis (12 steps), a 0.1M-parameter policy
    "cpu": Preset("smoke", stage_steps=12, prompts_per_step=8, num_generations=8, eval_n=128, pool_n=2000,
                  warm_max_steps=600, warm_check_every=50, probe_n=32),
    "small": Preset("small", stage_steps=25, prompts_per_step=16, num_generations=8, eval_n=256, pool_n=4000,
                    warm_max_steps=3000, warm_check_every=100, probe_n=64),
    "full": Preset("full", stage_steps=60, prompts_per_step=32, num_generations=8, eval_n=512, pool_n=16000,
                   warm_max_steps=8000, warm_check_every=200, probe_n=128),
    # a pretrained chat model (--policy smollm2) on a GPU: fine-tuning learning rates (the baselines'
    # range 1e-5..1e-4), a short supervised warm start only where the sampled pass rate is below 0.2
    "lm": Preset("small", stage_steps=8, prompts_per_step=8, num_generations=8, eval_n=64, pool_n=1000,
                 warm_max_steps=40, warm_check_every=20, probe_n=32, learning_rate=1e-5, warm_learning_rate=1e-5),
    # the same on a CPU: a pipeline check of minutes, no warm start
    "lm-cpu": Preset("smoke", stage_steps=8, prompts_per_step=2, num_generations=2, eval_n=8, pool_n=100,
                     warm_max_steps=0, warm_check_every=1, probe_n=4, learning_rate=1e-5),
}


def _state_bytes(policy) -> bytes:
    buf = io.BytesIO()
    torch.save(policy.state_dict(), buf)
    return buf.getvalue()


def _state_dict(data: bytes) -> dict:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _load_state(policy, data: bytes) -> None:
    policy.load_state_dict(_state_dict(data))


@dataclass
class StageResult:
    config: StageConfig
    state: bytes  # the policy's weights after the stage
    trace: list[dict]
    tune_reward: float
    train_reward: float
    seconds: float


@dataclass
class Session:
    """The task, base policy and evaluation sets every method of one comparison shares."""

    task_name: str
    preset: str = "smoke"
    seed: int = 0
    difficulty: int | None = None  # held-out reward is measured here; None: the task's default
    device: str = "cpu"
    policy_path: str | None = None  # a Hugging Face causal LM on disk instead of a character transformer
    kl_reference: str = "initial"  # every stage's KL anchor (StageConfig.kl_reference)
    task: object = field(init=False)
    vocab: Vocab = field(init=False)
    base_state: bytes = field(init=False, default=b"")
    base_tune: float = field(init=False, default=math.nan)
    warm: dict = field(init=False, default_factory=dict)
    # stages already trained (a resumed run's, by stage_key) and a hook told of every new one
    cache: dict = field(init=False, default_factory=dict)
    record: Callable[[str, StageResult, dict], None] | None = field(init=False, default=None)
    # signal probes taken (a resumed run's, by probe key) and a hook told of every new one
    probes: dict = field(init=False, default_factory=dict)
    record_probe: Callable[[str, SignalProbe, dict], None] | None = field(init=False, default=None)
    # samples and tokens generated by every stage asked for, cached ones included (a method's share
    # is the difference across its run)
    spent: Compute = field(init=False, default_factory=Compute)
    # the groups those stages sampled and how many had no reward variance (probes left out)
    groups: GroupTally = field(init=False, default_factory=GroupTally)
    # the stages asked for, cached ones included, and those an allowance cut or ran on
    trained: StageTally = field(init=False, default_factory=StageTally)
    # a ceiling on spent (a token budget's, see run_stage); None: stages run their steps
    allowance: Allowance | None = field(init=False, default=None)
    # greedy rewards by (weights' sha256, split): each set of weights is measured on a set once
    _rewards: dict = field(init=False, default_factory=dict)
    # the shortest of FIT_SAMPLE training prompts by difficulty, in tokens (see trainable)
    _shortest: dict = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        from loopwise.training.tasks import get_task, task_characters

        if self.preset not in PRESETS:
            raise UserError(f"unknown preset {self.preset!r}: one of {', '.join(PRESETS)}")
        if self.kl_reference not in KL_REFERENCES:
            raise UserError(f"unknown KL reference {self.kl_reference!r}: {' or '.join(KL_REFERENCES)}")
        self.p = PRESETS[self.preset]
        self.task = get_task(self.task_name)
        if self.difficulty is None:
            self.difficulty = min(1, self.task.max_difficulty)
        if not 0 <= self.difficulty <= self.task.max_difficulty:
            raise UserError(f"difficulty {self.difficulty}: {self.task_name} has 0..{self.task.max_difficulty}")
        self.tune = self.task.dataset("tune", self.p.eval_n, self.difficulty, seed=self.seed)
        self.test = self.task.dataset("test", self.p.eval_n, self.difficulty, seed=self.seed)
        self.train_probe = self.task.dataset("train", self.p.eval_n, self.difficulty, seed=self.seed + 1)
        self._template = None
        if self.policy_path:  # its tokenizer; completions end at end-of-sequence when answers span lines
            from loopwise.training.hf_policy import load_hf_policy

            multiline = any("\n" in (e.answer or "") for e in self.tune + self.test + self.train_probe)
            self._template, self.vocab = load_hf_policy(self.policy_path, device=self.device,
                                                        newline_ends=not multiline)
        else:  # the characters of the task's prompts and answers, and an unknown token for any other
            self.vocab = Vocab(task_characters(self.task), unk=True)
        self.answer_len = self.answer_tokens(self.difficulty, self.tune + self.test + self.train_probe)
        # in the policy's tokens: a chat template's turn markers and system preamble count
        longest = max(self.prompt_tokens(e.prompt) for e in self.tune + self.test + self.train_probe)
        self.max_len = longest + 4 * self.answer_len + 8
        if self._template is not None:
            self.max_len = min(self.max_len, self._template.spec.max_len)

    # -- the base --------------------------------------------------------------------------
    def default_config(self) -> StageConfig:
        return StageConfig(max_completion_length=self.answer_len + 2, num_generations=self.p.num_generations,
                           prompts_per_step=self.p.prompts_per_step, steps=self.p.stage_steps,
                           difficulty=self.difficulty, kl_reference=self.kl_reference,
                           # 3e-4 lowered held-out reward in every default-config stage of a CPU pilot
                           # (docs/log/2026-11-30.md, "Training engine: first figures"); 1e-4: the grid's best there
                           learning_rate=self.p.learning_rate or (1e-4 if self.p.policy != "full" else 5e-5))

    @property
    def learning_rate_range(self) -> tuple[float, float]:
        """The learning rates random search, TPE and PBT draw from (log-uniform): 1e-4 to 1e-3, or
        the preset's learning rate to ten times it when the preset names one."""
        low = self.p.learning_rate or RANDOM_LEARNING_RATE[0]
        return (low, low * RANDOM_LEARNING_RATE[1] / RANDOM_LEARNING_RATE[0])

    def describe(self) -> str:
        """The task in a few lines, for a model proposing transitions."""
        e = self.tune[0]
        policy = (f"the Hugging Face model {self.policy_path}" if self.policy_path
                  else f"a {self.p.policy} character transformer")
        from loopwise.training.tasks import TASKS

        reward = ("Reward 1 for a correct answer, 0.1 for a well-formed wrong one, 0 otherwise." if self.task_name in TASKS
                  else f"The task: {self.task.description}")
        answered = f"answered {e.answer!r}" if e.answer is not None else "scored by a verifier (no reference answer)"
        return (f"Task {self.task_name} at difficulty {self.difficulty}: for example the prompt {e.prompt[:300]!r} is "
                f"{answered}. {reward} The policy is {policy} warm-started by supervised "
                f"training (sampled pass rate {self.warm.get('pass_rate', float('nan')):.2f}); each stage trains "
                f"{self.p.stage_steps} GRPO steps of {self.p.prompts_per_step} prompts.")

    def new_policy(self):
        torch.manual_seed(self.seed)
        if self._template is not None:
            import copy

            return copy.deepcopy(self._template)
        return make_policy(self.vocab, self.p.policy, max_len=self.max_len).to(self.device)

    def prepare(self, progress: Callable[[int, float], None] | None = None) -> None:
        """Warm-starts the base policy (supervised, on the train split at the session's difficulty)."""
        policy = self.new_policy()
        train = self.task.dataset("train", self.p.pool_n, self.difficulty, seed=self.seed)
        # examples longer than the policy's positions (a reference past the task's sampled answer
        # bound, a prompt longer than the evaluation sets'): the warm start leaves them out
        train = [e for e in train if self._fits(e.prompt, max(self.answer_len + 2, len(self.vocab.encode(e.answer or ""))
                                                              + 1))]
        if not train:
            raise UserError(f"{self.task_name}: no training example fits the policy's {self.max_len} positions")
        self.warm = warm_start(policy, self.vocab, self.task, train, self.tune, self.answer_len + 2,
                               max_steps=self.p.warm_max_steps, check_every=self.p.warm_check_every,
                               lr=self.p.warm_learning_rate, seed=self.seed, progress=progress,
                               fresh_policy=self._template is None)
        self.base_state = _state_bytes(policy)
        self.base_tune = self._measure(policy, self.base_state, "tune")

    def trainable(self, config: StageConfig) -> bool:
        """Whether a stage of ``config`` has training prompts that fit the policy's positions with a
        whole completion: the shortest of :data:`FIT_SAMPLE` prompts at its difficulty does (a stage's
        pool is ten times larger, so it then holds some). The tuning baselines draw only such configs."""
        if config.difficulty not in self._shortest:
            sample = self.task.dataset("train", FIT_SAMPLE, config.difficulty, seed=self.seed)
            self._shortest[config.difficulty] = min(self.prompt_tokens(e.prompt) for e in sample)
        return self._shortest[config.difficulty] + config.max_completion_length <= self.max_len

    def _fits(self, prompt: str, completion_tokens: int) -> bool:
        """Whether ``prompt`` and a completion of ``completion_tokens`` fit the policy's positions."""
        return self.prompt_tokens(prompt) + completion_tokens <= self.max_len

    def prompt_tokens(self, prompt: str) -> int:
        """The positions ``prompt`` takes as the policy reads it (chat template included)."""
        return len(self.vocab.encode_prompt(prompt))

    def load_base(self, state: bytes, tune: float, warm: dict) -> None:
        self.base_state, self.base_tune, self.warm = state, tune, warm
        self._remember(state, tune=tune)

    @property
    def base_length(self) -> float | None:
        """The base's mean sampled completion length in tokens (the warm start's last pass-rate
        check): what a token budget expects a completion to cost. None for a base recorded without it."""
        length = self.warm.get("length")
        return float(length) if isinstance(length, (int, float)) and length > 0 else None

    def room(self, config: StageConfig) -> bool:
        """Whether one step of ``config`` fits the :attr:`allowance` (always, without one)."""
        return self.allowance is None or self.allowance.step_fits(self.spent, config)

    @contextmanager
    def held_to(self, allowance: Allowance | None) -> Iterator[None]:
        """:attr:`allowance` set to ``allowance`` inside the block, restored after it."""
        before, self.allowance = self.allowance, allowance
        try:
            yield
        finally:
            self.allowance = before

    # -- one stage ---------------------------------------------------------------------------
    def run_stage(self, parent: bytes, config: StageConfig, seed: int, steps: int | None = None,
                  progress: Callable[[int, int, dict], None] | None = None, label: dict | None = None,
                  probed: SignalProbe | None = None, to_allowance: bool = False) -> StageResult:
        """Trains a copy of ``parent`` for one stage of ``config`` (``steps`` overrides its length).
        A stage trained before (same parent weights, config, seed and length: training is
        deterministic) comes from :attr:`cache` instead, which is how a killed run resumes.
        ``label`` (where the stage sits in its method: node and parent, or repetition and index)
        goes to :attr:`record` with the result. ``probed``: this stage's signal probe
        (:meth:`probe_signal` with the same weights, config and seed), already paid for: it sampled
        exactly the stage's first step, so those samples are not charged again (the trainer draws
        the same tokens again rather than being handed them: CPU time, not budget).

        Under an :attr:`allowance` a step starts only when its most fits it: a stage cut short is
        the stage of the steps it ran (its config's ``steps``, key and record), so no later lookup
        reads it as the longer one; its greedy probes keep the planned length's schedule, so its key
        and record (``planned_steps``) also name that length, and a stage asked for with the steps
        it ran is not read as it either. ``to_allowance``: the stage trains on past its steps until the
        allowance stops it (a token budget's run spending its share, whatever its completions'
        lengths); such a stage, and one the allowance would cut, is trained rather than read from
        the cache (training is deterministic: the same steps again) and, when the cache held it
        (a resumed run), not recorded again."""
        if steps is not None:
            config = config.model_copy(update={"steps": steps})
        first = config.prompts_per_step
        if probed is not None and all(self.probes.get(_probe_key(parent, config, seed, groups)) is not probed
                                      for groups in {probe_groups(config) or first, first}):
            raise ValueError("the probe given is not this stage's first step (another weights, config or seed)")
        paid = probed.first if probed is not None else Compute()
        key = stage_key(parent, config, seed)
        if key in self.cache and not to_allowance and self._whole(self.cache[key], paid):
            cached = self.cache[key]
            self._remember(cached.state, tune=cached.tune_reward, train=cached.train_reward)
            self.spent = self.spent + stage_compute(cached.trace, cached.config.model_dump()) - paid
            self.groups = self.groups + stage_groups(cached.trace, cached.config)
            self.trained = self.trained + StageTally.of(config.steps, cached.config.steps)
            return cached
        t0 = time.perf_counter()
        pool = self._pool(config, seed)
        policy = self.new_policy()
        _load_state(policy, parent)
        # the start's rewards too (the parent's end, measured once), so the diagnosis sees what the
        # stage itself changed
        start = {"step": 0, "eval/reward": self._measure(policy, parent, "tune"),
                 "eval/train_reward": self._measure(policy, parent, "train")}
        reference = _state_dict(self.base_state) if config.kl_reference == "initial" and self.base_state else None
        probe, probe_prompts = self._probe(config.difficulty)
        trainer = GRPOTrainer(policy, self.vocab, self.task, config, pool, seed=seed, reference=reference,
                              probe=probe, probe_every=max(1, math.ceil(config.steps / PROBE_POINTS)),
                              probe_prompts=probe_prompts)
        trace = self._train(trainer, config, paid, to_allowance, progress)
        planned = config.steps
        if trainer.step_count != planned:  # cut short, or run on, by the allowance
            # its greedy probes and KL rows kept the planned length's schedule: a stage of the steps
            # it ran, asked for as such, probes on its own, so the key and record name both lengths
            config = config.model_copy(update={"steps": trainer.step_count})
            key = stage_key(parent, config, seed, planned=planned)
            label = {**(label or {}), "planned_steps": planned}
        state = _state_bytes(policy)
        tune, train = self._measure(policy, state, "tune"), self._measure(policy, state, "train")
        trace = [start] + trace + [{"step": trainer.step_count, "eval/reward": tune, "eval/train_reward": train}]
        result = StageResult(config, state, trace, tune, train, time.perf_counter() - t0)
        # trained again (a stage an allowance shaped, on a resume): the same stage, already recorded
        known = key in self.cache
        self.cache[key] = result
        self.spent = self.spent + stage_compute(trace, config.model_dump()) - paid
        self.groups = self.groups + stage_groups(trace, config)
        self.trained = self.trained + StageTally.of(planned, config.steps)
        if self.record is not None and not known:
            self.record(key, result, dict(label or {}))
        return result

    def _train(self, trainer: GRPOTrainer, config: StageConfig, paid: Compute, to_allowance: bool,
               progress) -> list[dict]:
        """The trainer's steps, stopped before any whose most would pass the :attr:`allowance`."""
        if self.allowance is None:
            return trainer.run(progress=progress)
        allowance, spent = self.allowance, self.spent - paid
        steps = max(config.steps, allowance.most_steps(spent, config)) if to_allowance else config.steps
        trace = trainer.run(steps=steps, progress=progress, stop=allowance.stop_rule(spent, config))
        if not trainer.step_count:
            raise ValueError("not one step of the stage fits the allowance: ask Session.room first")
        return trace

    def _whole(self, cached: StageResult, paid: Compute) -> bool:
        """Whether the :attr:`allowance` lets every step of the cached stage ``cached`` start."""
        return self.allowance is None or self.allowance.allows(self.spent - paid, cached.config, cached.trace)

    def _pool(self, config: StageConfig, seed: int) -> list:
        """A stage's training prompts: the train split at its difficulty, those that fit the
        policy's positions with a whole completion (a harder difficulty's prompts can outgrow them:
        a reasoning-gym curriculum's do)."""
        if config.max_completion_length + max(self.prompt_tokens(e.prompt) for e in self.tune) > self.max_len:
            raise UserError(f"max_completion_length {config.max_completion_length} does not fit the policy's "
                            f"{self.max_len} positions")
        pool = self.task.dataset("train", self.p.pool_n, config.difficulty, seed=seed)
        pool = [e for e in pool if self._fits(e.prompt, config.max_completion_length)]
        if not pool:
            raise UserError(f"difficulty {config.difficulty}: no training prompt fits the policy's {self.max_len} "
                            f"positions with a {config.max_completion_length}-token completion")
        return pool

    def probe_signal(self, parent: bytes, config: StageConfig, seed: int, label: dict | None = None,
                     top_up: bool = True) -> SignalProbe:
        """The first step's sampling of a stage of ``config`` from the weights ``parent``, without
        an update, topped up to the groups a verdict needs where the stage is long enough for that
        to pay (:func:`~loopwise.training.learning_signal.probe`,
        :func:`~loopwise.training.learning_signal.probe_groups`): whether the stage's groups would
        carry a reward signal. Its first step draws the prompts and completions the stage's first
        step with ``seed`` from ``parent`` draws (the same pool, generators and weights), so that
        stage, given the probe (``run_stage(..., probed=)``), does not pay for them twice. All its
        samples count in :attr:`spent`; a probe taken before (same weights, config, seed and size)
        comes from :attr:`probes`, and ``label`` goes to :attr:`record_probe`. ``top_up=False``: the
        first step alone (the caller has no room in its budget for more)."""
        from loopwise.training.learning_signal import probe

        groups = (probe_groups(config) if top_up else None) or config.prompts_per_step
        key = _probe_key(parent, config, seed, groups)
        if key not in self.probes:
            policy = self.new_policy()
            _load_state(policy, parent)
            self.probes[key] = probe(policy, self.vocab, self.task, self._pool(config, seed), config, seed,
                                     groups=groups)
            if self.record_probe is not None:
                self.record_probe(key, self.probes[key], dict(label or {}))
        self.spent = self.spent + self.probes[key].compute
        return self.probes[key]

    def _probe(self, difficulty: int) -> tuple[Callable[[object], float], int]:
        """Greedy reward on the first ``probe_n`` tune prompts at ``difficulty``, and how many prompts that is."""
        if difficulty == self.difficulty:
            examples = self.tune[:self.p.probe_n]
        else:
            examples = self.task.dataset("tune", self.p.probe_n, difficulty, seed=self.seed)
        room = self.max_len - max(self.prompt_tokens(e.prompt) for e in examples)
        length = min(self.answer_tokens(difficulty, examples) + 2, room)  # a harder level's prompts are longer
        return (lambda policy: evaluate(policy, self.vocab, self.task, examples, length)), len(examples)

    def answer_tokens(self, difficulty: int, examples: Sequence) -> int:
        """The task's answer bound at ``difficulty`` (characters) in the policy's tokens: the bound,
        or the longest reference answer of ``examples`` within it, tokenized, when a tokenizer needs
        more tokens than characters for it. A character vocabulary spends one token a character, so
        its caps are the bound; an answer longer than the task's own bound is not made room for.
        Completion caps add the end token and one spare position to it."""
        bound = self.task.max_answer_length(difficulty)
        within = [e.answer for e in examples if e.answer and len(e.answer) <= bound]
        return max([bound] + [len(self.vocab.encode(answer)) for answer in within])

    def test_reward(self, state: bytes) -> float:
        """Greedy reward of the weights ``state`` on the test set (measured once per weights)."""
        return self._measure(None, state, "test")

    def _measure(self, policy, state: bytes, split: str) -> float:
        """Greedy reward of ``state`` on the ``tune``, ``train`` (probe) or ``test`` set; ``policy``
        holds those weights already, or None to load them. Each weights are measured once per set."""
        key = (hashlib.sha256(state).digest(), split)
        if key not in self._rewards:
            if policy is None:
                policy = self.new_policy()
                _load_state(policy, state)
            examples = {"tune": self.tune, "train": self.train_probe, "test": self.test}[split]
            self._rewards[key] = evaluate(policy, self.vocab, self.task, examples, self.answer_len + 2)
        return self._rewards[key]

    def _remember(self, state: bytes, **rewards: float) -> None:
        digest = hashlib.sha256(state).digest()
        for split, value in rewards.items():
            self._rewards.setdefault((digest, split), value)

    def value(self, tune: float) -> float:
        """A stage's reward as the search's positive 'speedup' over the base."""
        return (tune + EPS) / (self.base_tune + EPS)


def stage_key(parent: bytes, config: StageConfig, seed: int, planned: int | None = None) -> str:
    """What identifies a stage's result: its starting weights, its config and its seed, and for a
    stage an allowance stopped at other than its planned steps, those ``planned`` steps (they set
    where its trace has greedy probes)."""
    h = hashlib.sha256(hashlib.sha256(parent).digest())
    h.update(json.dumps(config.model_dump(), sort_keys=True).encode())
    h.update(str(seed).encode())
    if planned is not None and planned != config.steps:
        h.update(f"planned {planned}".encode())
    return h.hexdigest()


def _probe_key(parent: bytes, config: StageConfig, seed: int, groups: int) -> str:
    """What identifies a signal probe: a stage's key at one step (its first step is any length's
    first), and the groups it may top up to when more than that step's."""
    more = f"-{groups}" if groups > config.prompts_per_step else ""
    return "probe-" + stage_key(parent, config.model_copy(update={"steps": 1}), seed) + more


def config_key(path: Sequence[StageConfig]) -> str:
    text = json.dumps([c.model_dump() for c in path], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Schedule:
    """A method's result: the stages it trained along its best path and their rewards."""

    method: str
    configs: list[StageConfig]
    tune_reward: float
    state: bytes
    stages_used: int
    test_reward: float = math.nan
    traces: list[list[dict]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # per stage, why its config was chosen (the tree's)
    compute: Compute = field(default_factory=Compute)  # every stage the method trained, not only these
    groups: GroupTally = field(default_factory=GroupTally)  # ... and their groups without reward variance
    trained: StageTally = field(default_factory=StageTally)  # ... and how many, cut or run on by an allowance
    # every path the method expanded, its start config first (the tree's: each node's, from the base)
    paths: list[list[StageConfig]] = field(default_factory=list)


def tree_bounds(session: Session) -> Bounds:
    """The knobs' ranges the tree's transitions keep to: the task's difficulties and the
    completion lengths that fit the policy's positions."""
    from loopwise.training.transitions import Bounds

    low, high = session.learning_rate_range
    return Bounds.for_task(session.task.max_difficulty, learning_rate=(low / 10, high * 3),
                           max_completion_length=(2, session.max_len - max(session.prompt_tokens(e.prompt)
                                                                           for e in session.tune)))
