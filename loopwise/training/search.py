"""Schedules of GRPO stages, searched and compared at equal compute budgets.

A :class:`Session` fixes what every method shares: the task, the base policy (a small transformer
warm-started by supervised training until its sampled pass rate reaches 0.2 or the preset's step limit), the difficulty
held-out reward is measured at, the tuning set (selection) and the test set (reporting). A
*stage* trains a copy of a parent's weights with one :class:`StageConfig` (a fresh trainer: new
optimizer, reference policy = the stage's starting weights) and is scored by greedy held-out
reward on the tuning set.

Methods, all from the same base and each held to the same :class:`~loopwise.training.compute.Budget`
of generated samples (or tokens). In samples a method starts a stage only when the stage's cost
fits what it has left, so it spends at most the budget and stops short of it by less than one of
its stages (the tree, staged, pbt) or one of its runs (fixed, grid, random, tpe). In tokens (known
only once generated) the session's :class:`~loopwise.training.compute.Allowance` stops training
before any step whose completions, all at their cap, could pass the budget: the tree and staged
start stages while a step fits and the last is cut short, the run-based methods' runs each train
until their equal cumulative share of the budget stops them; every method spends within one step
of the budget. The tree counts every node it trains, not only its best path. The baselines get the
number of default stages (or runs of ``depth`` of them) the budget buys, in tokens at the base's
mean sampled completion length (:attr:`~loopwise.training.session.Session.base_length`); one whose
config has another group size trains the steps that cost what the default's do:

- ``tree``: the shared MCTS (:mod:`loopwise.core.search`) over stages: a node is a checkpoint with
  its config and metric trace, an edge one stage. Expanding a node diagnoses its trace
  (:func:`~loopwise.training.diagnose.diagnose`) and proposes coordinated transitions
  (:func:`~loopwise.training.transitions.propose_transitions`); a node without findings is also
  continued unchanged (a fresh stage of the same config), as the root is with the default config.
  Schedules are at most ``depth`` stages long. A transition that changes what the next stage
  samples or how it is scored (difficulty, temperature, completion cap, group) is first probed
  where its stage is long enough for a probe to pay: the sampling of the stage's first step, from
  the parent, before any update, topped up while a stop is possible
  (:meth:`~loopwise.training.session.Session.probe_signal`); when the probe shows at
  :data:`~loopwise.training.learning_signal.CONFIDENCE` that at least
  :data:`~loopwise.training.learning_signal.NO_SIGNAL_SHARE` of the stage's groups would have no
  reward variance the transition is not applied (the probe's samples are paid from the budget) and
  the proposer's next offer takes its place; otherwise the probe's first step is the stage's (its
  top-up is paid). A trained node whose stage had that share of uniform groups learned nothing and
  is not expanded.
- ``fixed``: the default config trained continuously for ``depth`` stages' worth of steps (one
  trainer), repeated with other seeds while budget is left.
- ``staged``: the default config in ``depth`` stages (a fresh trainer at each boundary, no
  diagnosis), the staging-alone control the LLM-Zero-Lite replication calls for.
- ``grid``: points over every knob the tree's transitions move (:func:`grid_levels`), as many as
  the budget buys default runs of ``depth`` stages, each point trained continuously on an equal
  share of the budget (a point with a larger group trains fewer steps).
- ``random``: single configs drawn over every knob the tree's transitions move, within the tree's
  ranges (:mod:`loopwise.training.space`), each trained for ``depth`` stages' worth of samples, as
  many as fit.
- ``tpe``: Optuna's TPE (ask / tell) over the same space and runs; ``pbt``: population-based
  training over stages in the same space (:mod:`loopwise.training.hpo`).

The session, stages and schedules are in :mod:`loopwise.training.session`, the fixed, staged,
grid and random baselines in :mod:`loopwise.training.baselines`.

Each method's pick is its best schedule by tuning reward; the report gives that schedule's reward
on the test set, which no method saw.
"""

from __future__ import annotations

import random

from loopwise.errors import UserError
from loopwise.training.baselines import continuous, grid, random_search, staged
from loopwise.training.compute import BUDGET_NOTE, Allowance, Budget
from loopwise.training.session import Schedule, Session, config_key, tree_bounds

# -- the tree ---------------------------------------------------------------------------------
CONTINUE = "Continues unchanged: the diagnosis found nothing to answer."
MAX_PROBES_PER_EXPANSION = 4  # signal probes one expansion may spend (each at most a third of a cpu stage)


def tree_search(session: Session, budget: Budget, depth: int, seed: int = 0, width: int = 2,
                transitions=None) -> Schedule:
    """MCTS over stages: diagnose each checkpoint, propose ``width`` coordinated transitions.

    Every node trained, every signal probe that stopped a transition and every probe's top-up
    counts against ``budget``; the search ends at the first proposed stage that does not fit what
    is left.
    The schedule's ``notes`` say which transitions a probe stopped and which nodes were closed for
    want of a reward signal.

    ``transitions`` is where the next configs come from: None for the expert rules, or a callable
    with :func:`~loopwise.training.transitions.propose_transitions`' arguments plus ``trace`` and
    ``path`` (:class:`loopwise.training.proposer.ModelTransitions` for a model or an exchange folder)."""
    from loopwise.core.search import MCTS
    from loopwise.training.transitions import propose_transitions

    if transitions is None:
        def transitions(config, findings, rng_, n, bounds_, *, reward=None, trace=(), path=()):
            return propose_transitions(config, findings, rng_, n, bounds_)
    tree = _Tree(session, budget, depth, seed, width, transitions, MCTS(seed=seed))
    while not tree.out_of_budget:
        exp = tree.search.ask()
        if exp is None:
            break
        tree.expand(exp.node_id)
    return tree.schedule()


class _Tree:
    """The tree search's state: the MCTS, each node's checkpoint, trace and config, and the notes."""

    def __init__(self, session: Session, budget: Budget, depth: int, seed: int, width: int, transitions,
                 search) -> None:
        self.session, self.budget, self.depth, self.seed, self.width = session, budget, depth, seed, width
        self.transitions, self.search = transitions, search
        self.rng, self.bounds = random.Random(seed), tree_bounds(session)
        self.start, self.out_of_budget, self.notes = session.spent, False, []
        search.add_root("base", payload={"depth": 0})
        self.nodes: dict[int, dict] = {0: {"parent": None, "state": session.base_state, "trace": [],
                                           "config": session.default_config(), "tune": session.base_tune, "why": ""}}

    def lineage(self, node_id: int) -> list[int]:
        """The stages from the base to ``node_id``, the base left out."""
        out = []
        while node_id:
            out.append(node_id)
            node_id = self.nodes[node_id]["parent"]
        return out[::-1]

    def expand(self, node_id: int) -> None:
        """Diagnoses ``node_id``, then trains up to ``width`` of the proposed children; a child a
        signal probe rejects is replaced by the proposer's next offer (asked once more at most)."""
        from loopwise.training.diagnose import diagnose

        parent, ids = self.nodes[node_id], self.lineage(node_id)
        if len(ids) >= self.depth:
            self.search.close(node_id)
            return
        findings = diagnose(parent["trace"], parent["config"]) if node_id else []
        history = [(self.nodes[i]["config"], self.nodes[i]["tune"]) for i in ids]

        def propose(n: int) -> list[tuple]:
            return [(t.config, t.rationale, t.by) for t in self.transitions(
                parent["config"], findings, self.rng, n, self.bounds, reward=parent["tune"], trace=parent["trace"],
                path=history)]

        # without a finding, one child continues the config unchanged (the root's: the default config)
        queue = [] if findings else [(parent["config"], CONTINUE if node_id else "the default config", "default")]
        if self.width > len(queue):
            queue += propose(self.width - len(queue))
        path = [self.nodes[i]["config"] for i in ids]
        tried: set[str] = set()
        added = probes = 0
        refilled = False
        while queue and added < self.width and not self.out_of_budget:
            cfg, why, by = queue.pop(0)
            key = config_key(path + [cfg])
            if key in tried or self.search.find(key) is not None:
                continue
            tried.add(key)
            verdict, probe = self._admit(node_id, cfg, why, probes < MAX_PROBES_PER_EXPANSION)
            probes += probe is not None
            if verdict == "rejected" and not queue and not refilled:  # the proposer's next offers
                queue, refilled = propose(self.width + len(tried)), True
            if verdict in ("direct", "probed"):
                self._train(node_id, key, cfg, {"depth": len(ids) + 1, "why": why, "by": by}, probe)
                added += 1
        if not added and not self.out_of_budget:
            self.search.close(node_id)

    def _admit(self, node_id: int, cfg, why: str, may_probe: bool):
        """Whether ``cfg`` may be trained below ``node_id``, and the probe taken if any:
        ``direct`` (it samples as its parent does), ``probed`` (a signal probe found groups with a
        signal), ``rejected`` (it showed there would be none, or the groups that could show it do
        not fit the budget and its first step had no signal), ``skipped`` (it needs a probe and the
        expansion has spent its probes) or ``budget`` (the stage does not fit what is left). A stage
        too short for a probe to pay is ``direct``: its own trace closes it if it learned nothing. A
        probe costs at most its stage's samples, and an admitted stage's first step is its probe's."""
        from loopwise.training.compute import Compute
        from loopwise.training.learning_signal import NO_SIGNAL_SHARE, probe_groups, sampling_changed, \
            uniform_share_bound

        parent, spent = self.nodes[node_id], self.session.spent - self.start
        # a token budget's allowance admits a stage whose first step fits (it is cut where the next would not)
        if not (self.session.room(cfg) if self.session.allowance is not None else self.budget.fits(spent, cfg)):
            self.out_of_budget = True
            if self.session.allowance is not None:
                self.notes.append(f"stopped below node {node_id}: a step of {cfg.prompts_per_step * cfg.num_generations}"
                                  f" completions of up to {cfg.max_completion_length} tokens ({why}) does not fit "
                                  f"the {self.budget.amount - self.budget.of(spent):,} tokens left {BUDGET_NOTE}")
            return "budget", None
        groups = probe_groups(cfg)
        if not sampling_changed(parent["config"], cfg) or groups is None:
            return "direct", None
        if not may_probe:
            return "skipped", None
        rest = groups - cfg.prompts_per_step
        room = self.budget.fits(spent + Compute(rest * cfg.num_generations,
                                                rest * cfg.num_generations * cfg.max_completion_length), cfg)
        # the first step of the stage the child would train (seeded by the node id it would take),
        # topped up where the budget has room for it next to the stage
        probe = self.session.probe_signal(parent["state"], cfg, self.seed * 1000 + len(self.search),
                                          label={"node": len(self.search), "parent": node_id, "why": why},
                                          top_up=room)
        if not room and uniform_share_bound(probe.zero_variance + rest, groups) >= NO_SIGNAL_SHARE:
            # a stop was still possible, and the groups that would settle it do not fit the budget
            self.notes.append(f"node {node_id}: not applied ({why}): {probe.describe()}; the {groups} groups a "
                              "verdict needs do not fit the budget with the stage")
            return "rejected", probe
        if probe.learnable:
            return "probed", probe
        self.notes.append(f"node {node_id}: not applied ({why}): {probe.describe()}")
        return "rejected", probe

    def _train(self, node_id: int, key: str, cfg, label: dict, probe=None) -> None:
        """Trains the child ``cfg`` of ``node_id`` and tells the search; a child whose stage had no
        reward signal in (almost) any group learned nothing and is closed."""
        from loopwise.core.search import Outcome
        from loopwise.training.learning_signal import NO_SIGNAL_SHARE, zero_variance_share

        parent = self.nodes[node_id]
        child = self.search.add_child(node_id, key, payload={"depth": label["depth"]})
        result = self.session.run_stage(parent["state"], cfg, self.seed * 1000 + child,
                                        label={"node": child, "parent": node_id, **label}, probed=probe)
        self.nodes[child] = {"parent": node_id, "state": result.state, "trace": result.trace,
                             "config": result.config, "tune": result.tune_reward, "why": label["why"]}
        if result.config.steps < cfg.steps:  # the allowance cut it: the budget is spent
            self.out_of_budget = True
            self.notes.append(f"node {child}: cut after {result.config.steps} of {cfg.steps} steps {BUDGET_NOTE}")
        self.search.tell(child, Outcome("correct", self.session.value(result.tune_reward)))
        share = zero_variance_share(result.trace)
        if share is not None and share >= NO_SIGNAL_SHARE:
            self.search.close(child)
            self.notes.append(f"node {child}: closed: {share:.0%} of its groups had no reward variance "
                              f"({label['why']})")

    def schedule(self) -> Schedule:
        """The best node by tune reward (the earliest among equals) and the stages that lead to it,
        with every node's path from the base's (the default) config."""
        nodes = self.nodes
        best_id = max((n for n in nodes if n != 0), key=lambda n: (nodes[n]["tune"], -n), default=0)
        ids = self.lineage(best_id)
        paths = [[nodes[0]["config"]] + [nodes[i]["config"] for i in self.lineage(n)] for n in sorted(nodes) if n]
        return Schedule("tree", [nodes[i]["config"] for i in ids], nodes[best_id]["tune"], nodes[best_id]["state"],
                        self.search.n_evals, traces=[nodes[i]["trace"] for i in ids],
                        reasons=[nodes[i]["why"] for i in ids], notes=self.notes, paths=paths)


METHODS = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")


def run_method(method: str, session: Session, budget: Budget, depth: int, seed: int = 0,
               transitions=None) -> Schedule:
    """One method's best schedule within ``budget``, schedules at most ``depth`` stages, with its
    test reward and what it spent (``compute``)."""
    # default stages the budget buys (in tokens at the base's expected completion length)
    stages = budget.stages(session.default_config(), length=session.base_length)
    if stages < depth:
        raise UserError(f"a budget of {budget.amount:,} {budget.unit} buys {stages} default stages, below the "
                        f"schedule depth {depth}")
    before, groups, trained = session.spent, session.groups, session.trained
    # a token budget holds the method to it step by step (a stage's tokens are known once it ran)
    allowance = Allowance(budget, budget.of(before) + budget.amount) if budget.unit == "tokens" else None
    with session.held_to(allowance):
        schedule = _search(method, session, budget, depth, stages, seed, transitions)
    schedule.test_reward = session.test_reward(schedule.state)
    schedule.compute = session.spent - before
    schedule.groups = session.groups - groups
    schedule.trained = session.trained - trained
    return schedule


def _search(method: str, session: Session, budget: Budget, depth: int, stages: int, seed: int,
            transitions) -> Schedule:
    """``method``'s schedule, ``stages`` default stages of ``budget`` the most it trains."""
    if method == "tree":
        schedule = tree_search(session, budget, depth, seed, transitions=transitions)
    elif method == "fixed":
        schedule = continuous(session, stages, depth, seed)
    elif method == "staged":
        schedule = staged(session, stages, depth, seed)
    elif method == "grid":
        schedule = grid(session, budget, depth, seed)
    elif method == "random":
        schedule = random_search(session, budget, depth, seed)
    elif method == "tpe":
        from loopwise.training.hpo import tpe

        # Optuna's TPE draws its first 10 trials at random; at a few trials that would be random
        # search again, so a third of them (at least 2) start it here
        schedule = tpe(session, stages, depth, seed, startup_trials=max(2, (stages // depth) // 3), unit=budget.unit)
    elif method == "pbt":
        from loopwise.training.hpo import pbt

        schedule = pbt(session, stages, depth, seed, unit=budget.unit)
    else:
        raise UserError(f"unknown method {method!r}: one of {', '.join(METHODS)}")
    return schedule
