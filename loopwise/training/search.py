"""Schedules of GRPO stages, searched and compared at equal compute budgets.

A :class:`Session` fixes what every method shares: the task, the base policy (a small transformer
warm-started by supervised training until its sampled pass rate lies in (0, 1)), the difficulty
held-out reward is measured at, the tuning set (selection) and the test set (reporting). A
*stage* trains a copy of a parent's weights with one :class:`StageConfig` (a fresh trainer: new
optimizer, reference policy = the stage's starting weights) and is scored by greedy held-out
reward on the tuning set.

Methods, all from the same base and each held to the same :class:`~loopwise.training.compute.Budget`
of generated samples (or tokens): a method starts a stage only when the stage's cost fits what it
has left, so it spends at most the budget and stops short of it by less than one of its stages (the
tree, staged, pbt) or one of its runs (fixed, grid, random, tpe). The tree counts every node it
trains, not only its best path. The baselines whose configs all cost what the default stage costs
(fixed, staged, random, tpe, pbt) get the number of default stages the budget buys:

- ``tree``: the shared MCTS (:mod:`loopwise.core.search`) over stages: a node is a checkpoint with
  its config and metric trace, an edge one stage. Expanding a node diagnoses its trace
  (:func:`~loopwise.training.diagnose.diagnose`) and proposes coordinated transitions
  (:func:`~loopwise.training.transitions.propose_transitions`); schedules are at most ``depth``
  stages long.
- ``fixed``: the default config trained continuously for ``depth`` stages' worth of steps (one
  trainer), repeated with other seeds while budget is left.
- ``staged``: the default config in ``depth`` stages (a fresh trainer at each boundary, no
  diagnosis), the staging-alone control the LLM-Zero-Lite replication calls for.
- ``grid``: points over every knob the tree's transitions move (:func:`grid_levels`), as many as
  the budget buys default runs of ``depth`` stages, each point trained continuously on an equal
  share of the budget (a point with a larger group trains fewer steps).
- ``random``: single configs over learning rate, KL and temperature, each trained for ``depth``
  stages' worth of steps, as many as fit.
- ``tpe``: Optuna's TPE (ask / tell) over the same knobs and runs; ``pbt``: population-based
  training over stages (:mod:`loopwise.training.hpo`).

Each method's pick is its best schedule by tuning reward; the report gives that schedule's reward
on the test set, which no method saw.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from loopwise.errors import UserError
from loopwise.training.compute import Budget, Compute, stage_compute
from loopwise.training.config import StageConfig
from loopwise.training.grpo import GRPOTrainer, evaluate, warm_start
from loopwise.training.policy import Vocab, make_policy

if TYPE_CHECKING:
    from loopwise.training.transitions import Bounds

EPS = 0.01  # added to rewards before they are compared as ratios (a reward can be 0)


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


PRESETS = {
    # a pipeline check: stages just long enough for the diagnosis (trace_stats.MIN_STEPS), so the tree's
    # expansions past the first read findings
    "smoke": Preset("smoke", stage_steps=8, prompts_per_step=4, num_generations=4, eval_n=48, pool_n=400,
                    warm_max_steps=150, warm_check_every=25),
    # a CPU-sized comparison: stages long enough for the diagnosis (12 steps), a 0.1M-parameter policy
    "cpu": Preset("smoke", stage_steps=12, prompts_per_step=8, num_generations=8, eval_n=128, pool_n=2000,
                  warm_max_steps=600, warm_check_every=50),
    "small": Preset("small", stage_steps=25, prompts_per_step=16, num_generations=8, eval_n=256, pool_n=4000,
                    warm_max_steps=3000, warm_check_every=100),
    "full": Preset("full", stage_steps=60, prompts_per_step=32, num_generations=8, eval_n=512, pool_n=16000,
                   warm_max_steps=8000, warm_check_every=200),
}


def _state_bytes(policy) -> bytes:
    buf = io.BytesIO()
    torch.save(policy.state_dict(), buf)
    return buf.getvalue()


def _load_state(policy, data: bytes) -> None:
    policy.load_state_dict(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))


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
    task: object = field(init=False)
    vocab: Vocab = field(init=False)
    base_state: bytes = field(init=False, default=b"")
    base_tune: float = field(init=False, default=math.nan)
    warm: dict = field(init=False, default_factory=dict)
    # stages already trained (a resumed run's, by stage_key) and a hook told of every new one
    cache: dict = field(init=False, default_factory=dict)
    record: Callable[[str, StageResult, dict], None] | None = field(init=False, default=None)
    # samples and tokens generated by every stage asked for, cached ones included (a method's share
    # is the difference across its run)
    spent: Compute = field(init=False, default_factory=Compute)
    # greedy rewards by (weights' sha256, split): each set of weights is measured on a set once
    _rewards: dict = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        from loopwise.training.tasks import ALPHABET, get_task

        if self.preset not in PRESETS:
            raise UserError(f"unknown preset {self.preset!r}: one of {', '.join(PRESETS)}")
        self.p = PRESETS[self.preset]
        self.task = get_task(self.task_name)
        if self.difficulty is None:
            self.difficulty = min(1, self.task.max_difficulty)
        if not 0 <= self.difficulty <= self.task.max_difficulty:
            raise UserError(f"difficulty {self.difficulty}: {self.task_name} has 0..{self.task.max_difficulty}")
        self._template = None
        if self.policy_path:
            from loopwise.training.hf_policy import load_hf_policy

            self._template, self.vocab = load_hf_policy(self.policy_path, device=self.device)
        else:
            self.vocab = Vocab(ALPHABET)
        self.answer_len = self.task.max_answer_length(self.difficulty)
        self.tune = self.task.dataset("tune", self.p.eval_n, self.difficulty, seed=self.seed)
        self.test = self.task.dataset("test", self.p.eval_n, self.difficulty, seed=self.seed)
        self.train_probe = self.task.dataset("train", self.p.eval_n, self.difficulty, seed=self.seed + 1)
        longest = max(len(e.prompt) for e in self.tune + self.test + self.train_probe)
        self.max_len = longest + 4 * self.answer_len + 8
        if self._template is not None:
            self.max_len = min(self.max_len, self._template.spec.max_len)

    # -- the base --------------------------------------------------------------------------
    def default_config(self) -> StageConfig:
        return StageConfig(max_completion_length=self.answer_len + 2, num_generations=self.p.num_generations,
                           prompts_per_step=self.p.prompts_per_step, steps=self.p.stage_steps,
                           difficulty=self.difficulty,
                           # 3e-4 lowered held-out reward in every default-config stage of a CPU pilot
                           # (docs/log/2026-11-30.md, "Training engine: first figures"); 1e-4: the grid's best there
                           learning_rate=1e-4 if self.p.policy != "full" else 5e-5)

    def describe(self) -> str:
        """The task in a few lines, for a model proposing transitions."""
        e = self.tune[0]
        policy = (f"the Hugging Face model {self.policy_path}" if self.policy_path
                  else f"a {self.p.policy} character transformer")
        return (f"Task {self.task_name} at difficulty {self.difficulty}: for example the prompt {e.prompt!r} is "
                f"answered {e.answer!r}. Reward 1 for a correct answer, 0.1 for a well-formed wrong one, 0 "
                f"otherwise. The policy is {policy} warm-started by supervised "
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
        self.warm = warm_start(policy, self.vocab, self.task, train, self.tune, self.answer_len + 2,
                               max_steps=self.p.warm_max_steps, check_every=self.p.warm_check_every,
                               seed=self.seed, progress=progress)
        self.base_state = _state_bytes(policy)
        self.base_tune = self._measure(policy, self.base_state, "tune")

    def load_base(self, state: bytes, tune: float, warm: dict) -> None:
        self.base_state, self.base_tune, self.warm = state, tune, warm
        self._remember(state, tune=tune)

    # -- one stage ---------------------------------------------------------------------------
    def run_stage(self, parent: bytes, config: StageConfig, seed: int, steps: int | None = None,
                  progress: Callable[[int, int, dict], None] | None = None, label: dict | None = None) -> StageResult:
        """Trains a copy of ``parent`` for one stage of ``config`` (``steps`` overrides its length).
        A stage trained before (same parent weights, config, seed and length: training is
        deterministic) comes from :attr:`cache` instead, which is how a killed run resumes.
        ``label`` (where the stage sits in its method: node and parent, or repetition and index)
        goes to :attr:`record` with the result."""
        if steps is not None:
            config = config.model_copy(update={"steps": steps})
        key = stage_key(parent, config, seed)
        if key in self.cache:
            cached = self.cache[key]
            self._remember(cached.state, tune=cached.tune_reward, train=cached.train_reward)
            self.spent = self.spent + stage_compute(cached.trace, cached.config.model_dump())
            return cached
        if config.max_completion_length + max(len(e.prompt) for e in self.tune) > self.max_len:
            raise UserError(f"max_completion_length {config.max_completion_length} does not fit the policy's "
                            f"{self.max_len} positions")
        t0 = time.perf_counter()
        policy = self.new_policy()
        _load_state(policy, parent)
        pool = self.task.dataset("train", self.p.pool_n, config.difficulty, seed=seed)
        # the start's rewards too (the parent's end, measured once), so the diagnosis sees what the
        # stage itself changed
        start = {"step": 0, "eval/reward": self._measure(policy, parent, "tune"),
                 "eval/train_reward": self._measure(policy, parent, "train")}
        trainer = GRPOTrainer(policy, self.vocab, self.task, config, pool, seed=seed)
        trace = trainer.run(progress=progress)
        state = _state_bytes(policy)
        tune, train = self._measure(policy, state, "tune"), self._measure(policy, state, "train")
        trace = [start] + trace + [{"step": trainer.step_count, "eval/reward": tune, "eval/train_reward": train}]
        result = StageResult(config, state, trace, tune, train, time.perf_counter() - t0)
        self.cache[key] = result
        self.spent = self.spent + stage_compute(trace, config.model_dump())
        if self.record is not None:
            self.record(key, result, dict(label or {}))
        return result

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


def stage_key(parent: bytes, config: StageConfig, seed: int) -> str:
    """What identifies a stage's result: its starting weights, its config and its seed."""
    h = hashlib.sha256(hashlib.sha256(parent).digest())
    h.update(json.dumps(config.model_dump(), sort_keys=True).encode())
    h.update(str(seed).encode())
    return h.hexdigest()


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
    compute: Compute = field(default_factory=Compute)  # every stage the method trained, not only these


# -- methods ---------------------------------------------------------------------------------
def tree_bounds(session: Session) -> Bounds:
    """The knobs' ranges the tree's transitions keep to: the task's difficulties and the
    completion lengths that fit the policy's positions."""
    from loopwise.training.transitions import Bounds

    return Bounds.for_task(session.task.max_difficulty,
                           max_completion_length=(2, session.max_len - max(len(e.prompt) for e in session.tune)))


def tree_search(session: Session, budget: Budget, depth: int, seed: int = 0, width: int = 2,
                transitions=None) -> Schedule:
    """MCTS over stages: diagnose each checkpoint, propose ``width`` coordinated transitions.

    Every node trained counts against ``budget``; the search ends at the first proposed stage that
    does not fit what is left.

    ``transitions`` is where the next configs come from: None for the expert rules, or a callable
    with :func:`~loopwise.training.transitions.propose_transitions`' arguments plus ``trace`` and
    ``path`` (:class:`loopwise.training.proposer.ModelTransitions` for a model or an exchange folder)."""
    from loopwise.core.search import MCTS, Outcome
    from loopwise.training.diagnose import diagnose
    from loopwise.training.transitions import propose_transitions

    search = MCTS(seed=seed)
    rng = random.Random(seed)
    start, out_of_budget = session.spent, False
    bounds = tree_bounds(session)
    root_cfg = session.default_config()
    if transitions is None:
        def transitions(config, findings, rng_, n, bounds_, *, reward=None, trace=(), path=()):
            return propose_transitions(config, findings, rng_, n, bounds_, reward=reward)
    search.add_root("base", payload={"depth": 0})
    nodes: dict[int, dict] = {0: {"parent": None, "state": session.base_state, "trace": [], "config": root_cfg,
                                  "tune": session.base_tune}}

    def lineage(node_id: int) -> list[int]:
        """The stages from the base to ``node_id``, the base left out."""
        out = []
        while node_id:
            out.append(node_id)
            node_id = nodes[node_id]["parent"]
        return out[::-1]

    while not out_of_budget:
        exp = search.ask()
        if exp is None:
            break
        parent, ids = nodes[exp.node_id], lineage(exp.node_id)
        path = [nodes[i]["config"] for i in ids]
        if len(ids) >= depth:
            search.close(exp.node_id)
            continue
        if exp.node_id == 0:
            extra = transitions(root_cfg, [], rng, width - 1, bounds, reward=session.base_tune) if width > 1 else []
            proposals = [root_cfg] + [t.config for t in extra]
        else:
            findings = diagnose(parent["trace"], parent["config"])
            history = [(nodes[i]["config"], nodes[i]["tune"]) for i in ids]
            proposals = [t.config for t in transitions(parent["config"], findings, rng, width, bounds,
                                                       reward=parent["tune"], trace=parent["trace"], path=history)]
        added = []
        for cfg in proposals:
            key = config_key(path + [cfg])
            if search.find(key) is not None:
                continue
            added.append((search.add_child(exp.node_id, key, payload={"depth": len(ids) + 1}), cfg, key))
        if not added:
            search.close(exp.node_id)
            continue
        for node_id, cfg, _ in added:
            if not budget.fits(session.spent - start, cfg):
                out_of_budget = True
                break
            result = session.run_stage(parent["state"], cfg, seed * 1000 + node_id,
                                       label={"node": node_id, "parent": exp.node_id, "depth": len(ids) + 1})
            nodes[node_id] = {"parent": exp.node_id, "state": result.state, "trace": result.trace, "config": cfg,
                              "tune": result.tune_reward}
            search.tell(node_id, Outcome("correct", session.value(result.tune_reward)))
    best_id = max((n for n in nodes if n != 0), key=lambda n: (nodes[n]["tune"], -n), default=0)
    best, ids = nodes[best_id], lineage(best_id)
    return Schedule("tree", [nodes[i]["config"] for i in ids], best["tune"], best["state"], search.n_evals,
                    traces=[nodes[i]["trace"] for i in ids])


def staged(session: Session, budget: int, depth: int, seed: int = 0, configs: Sequence[StageConfig] | None = None,
           method: str = "staged") -> Schedule:
    """``configs`` (default: the default config ``depth`` times) as stages, repeated with new seeds
    while budget is left; the best repetition by tuning reward."""
    configs = list(configs or [session.default_config()] * depth)
    best, used, rep = None, 0, 0
    while used + len(configs) <= budget:
        state, traces, tune = session.base_state, [], session.base_tune
        for i, cfg in enumerate(configs):
            result = session.run_stage(state, cfg, seed * 1000 + rep * 100 + i, label={"rep": rep, "stage": i})
            state, tune = result.state, result.tune_reward
            traces.append(result.trace)
        used += len(configs)
        if best is None or tune > best.tune_reward:
            best = Schedule(method, configs, tune, state, 0, traces=traces)
        rep += 1
    if best is None:
        raise UserError(f"a budget of {budget} stages is less than one {method} schedule of {len(configs)}")
    best.stages_used = used
    return best


def continuous(session: Session, budget: int, depth: int, seed: int = 0, configs: Sequence[StageConfig] | None = None,
               method: str = "fixed") -> Schedule:
    """Each config trained without a break for ``depth`` stages' worth of steps (one trainer), as
    many configs as the budget allows (``budget // depth``); the best by tuning reward."""
    configs = list(configs or [session.default_config()] * max(1, budget // depth))
    best, used = None, 0
    for i, cfg in enumerate(configs):
        if used + depth > budget:
            break
        result = session.run_stage(session.base_state, cfg, seed * 1000 + i, steps=cfg.steps * depth,
                                   label={"rep": i, "stage": 0})
        used += depth
        if best is None or result.tune_reward > best.tune_reward:
            best = Schedule(method, [cfg.model_copy(update={"steps": cfg.steps * depth})], result.tune_reward,
                            result.state, 0, traces=[result.trace])
    if best is None:
        raise UserError(f"a budget of {budget} stages is less than one {method} run of {depth}")
    best.stages_used = used
    return best


def grid_levels(session: Session) -> dict[str, tuple]:
    """Each knob the tree's transitions move (:data:`~loopwise.training.transitions.STEPS`) at the
    default config's value and one transition step down and up, within the tree's bounds
    (:func:`tree_bounds`); a level that falls outside them, or repeats another, is left out."""
    from loopwise.training.transitions import STEPS

    base, bounds = session.default_config(), tree_bounds(session)
    levels = {}
    for knob, step in STEPS.items():
        value = getattr(base, knob)
        moved = [bounds.limit(knob, value, step.move(value, d)) for d in ("down", "up")]
        levels[knob] = tuple(dict.fromkeys([value, *moved]))
    return levels


def grid_configs(session: Session, n: int, seed: int = 0) -> list[StageConfig]:
    """``n`` points of :func:`grid_levels`: the whole product when it has at most ``n`` points,
    else a Latin hypercube over the levels (each knob's levels used equally often, plus or minus
    one, paired across knobs by a permutation seeded with ``seed``). Points the config rejects
    (a lopsided clip range) are left out."""
    levels = grid_levels(session)
    base, rng = session.default_config(), random.Random(f"grid:{seed}")
    if math.prod(len(v) for v in levels.values()) <= n:
        points = [dict(zip(levels, values)) for values in itertools.product(*levels.values())]
    else:
        columns = {}
        for knob, values in levels.items():
            order = list(values)
            rng.shuffle(order)
            column = [order[i % len(order)] for i in range(n)]
            rng.shuffle(column)
            columns[knob] = column
        points = [{k: columns[k][i] for k in levels} for i in range(n)]
    out = []
    for p in points:
        try:
            out.append(StageConfig(**(base.model_dump() | p)))
        except ValueError:
            continue
    return out


def grid(session: Session, budget: Budget, depth: int, seed: int = 0) -> Schedule:
    """The grid's points, as many as the budget buys default runs of ``depth`` stages, each trained
    continuously (one trainer) on an equal share of the budget: its steps are the most whose cost
    fits the share."""
    n = max(1, budget.stages(session.default_config()) // depth)
    share = budget.amount // n
    runs = []
    for cfg in grid_configs(session, n, seed):
        steps = share // budget.stage_cost(cfg, steps=1)
        if steps >= 1:
            runs.append(cfg.model_copy(update={"steps": steps}))
    if not runs:
        raise UserError(f"a budget of {budget.amount} {budget.unit} buys no step of any grid point")
    schedule = continuous(session, len(runs), 1, seed, runs, "grid")
    schedule.stages_used = max(1, round(sum(c.steps for c in runs) / session.p.stage_steps))
    return schedule


def random_configs(session: Session, n: int, seed: int = 0) -> list[StageConfig]:
    """``n`` configs drawn log-uniformly over the grid's ranges (learning rate, KL, temperature)."""
    rng = random.Random(seed)
    base = session.default_config()
    out = []
    for _ in range(n):
        out.append(base.model_copy(update={
            "learning_rate": math.exp(rng.uniform(math.log(1e-4), math.log(1e-3))),
            "beta": rng.choice((0.0, math.exp(rng.uniform(math.log(0.005), math.log(0.1))))),
            "temperature": rng.uniform(0.7, 1.2)}))
    return out


METHODS = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")


def run_method(method: str, session: Session, budget: Budget, depth: int, seed: int = 0,
               transitions=None) -> Schedule:
    """One method's best schedule within ``budget``, schedules at most ``depth`` stages, with its
    test reward and what it spent (``compute``)."""
    stages = budget.stages(session.default_config())  # default stages the budget buys
    if stages < depth:
        raise UserError(f"a budget of {budget.amount:,} {budget.unit} buys {stages} default stages, below the "
                        f"schedule depth {depth}")
    before = session.spent
    if method == "tree":
        schedule = tree_search(session, budget, depth, seed, transitions=transitions)
    elif method == "fixed":
        schedule = continuous(session, stages, depth, seed)
    elif method == "staged":
        schedule = staged(session, stages, depth, seed)
    elif method == "grid":
        schedule = grid(session, budget, depth, seed)
    elif method == "random":
        schedule = continuous(session, stages, depth, seed, random_configs(session, stages // depth, seed), "random")
    elif method == "tpe":
        from loopwise.training.hpo import tpe

        # Optuna's TPE draws its first 10 trials at random; at a few trials that would be random
        # search again, so a third of them (at least 2) start it here
        schedule = tpe(session, stages, depth, seed, startup_trials=max(2, (stages // depth) // 3))
    elif method == "pbt":
        from loopwise.training.hpo import pbt

        schedule = pbt(session, stages, depth, seed)
    else:
        raise UserError(f"unknown method {method!r}: one of {', '.join(METHODS)}")
    schedule.test_reward = session.test_reward(schedule.state)
    schedule.compute = session.spent - before
    return schedule
