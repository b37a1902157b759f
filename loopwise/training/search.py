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
trains, not only its best path. The baselines get the number of default stages (or runs of
``depth`` of them) the budget buys; one whose config has another group size trains the steps that
cost what the default's do:

- ``tree``: the shared MCTS (:mod:`loopwise.core.search`) over stages: a node is a checkpoint with
  its config and metric trace, an edge one stage. Expanding a node diagnoses its trace
  (:func:`~loopwise.training.diagnose.diagnose`) and proposes coordinated transitions
  (:func:`~loopwise.training.transitions.propose_transitions`); a node without findings is also
  continued unchanged (a fresh stage of the same config), as the root is with the default config.
  Schedules are at most ``depth`` stages long. A transition that changes what the next stage
  samples or how it is scored (difficulty, temperature, completion cap, group) is first probed:
  one step's sampling from the parent, no update
  (:meth:`~loopwise.training.session.Session.probe_signal`, its samples paid from the budget); when
  at least :data:`~loopwise.training.learning_signal.NO_SIGNAL_SHARE` of the probe's groups have no
  reward variance the transition is not applied and the proposer's next offer takes its place. A
  trained node whose stage had that share of uniform groups learned nothing and is not expanded.
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
from loopwise.training.compute import Budget
from loopwise.training.session import Schedule, Session, config_key, tree_bounds

# -- the tree ---------------------------------------------------------------------------------
CONTINUE = "Continues unchanged: the diagnosis found nothing to answer."
MAX_PROBES_PER_EXPANSION = 4  # signal probes one expansion may spend (each one step's samples)


def tree_search(session: Session, budget: Budget, depth: int, seed: int = 0, width: int = 2,
                transitions=None) -> Schedule:
    """MCTS over stages: diagnose each checkpoint, propose ``width`` coordinated transitions.

    Every node trained and every signal probe taken counts against ``budget``; the search ends at
    the first proposed stage that does not fit what is left (with its probe, when it needs one).
    The schedule's ``notes`` say which transitions a probe stopped and which nodes were closed for
    want of a reward signal.

    ``transitions`` is where the next configs come from: None for the expert rules, or a callable
    with :func:`~loopwise.training.transitions.propose_transitions`' arguments plus ``trace`` and
    ``path`` (:class:`loopwise.training.proposer.ModelTransitions` for a model or an exchange folder)."""
    from loopwise.core.search import MCTS, Outcome
    from loopwise.training.diagnose import diagnose
    from loopwise.training.learning_signal import NO_SIGNAL_SHARE, sampling_changed, zero_variance_share
    from loopwise.training.transitions import propose_transitions

    search = MCTS(seed=seed)
    rng = random.Random(seed)
    start, out_of_budget = session.spent, False
    bounds = tree_bounds(session)
    root_cfg = session.default_config()
    if transitions is None:
        def transitions(config, findings, rng_, n, bounds_, *, reward=None, trace=(), path=()):
            return propose_transitions(config, findings, rng_, n, bounds_)
    search.add_root("base", payload={"depth": 0})
    nodes: dict[int, dict] = {0: {"parent": None, "state": session.base_state, "trace": [], "config": root_cfg,
                                  "tune": session.base_tune, "why": ""}}

    def lineage(node_id: int) -> list[int]:
        """The stages from the base to ``node_id``, the base left out."""
        out = []
        while node_id:
            out.append(node_id)
            node_id = nodes[node_id]["parent"]
        return out[::-1]

    notes: list[str] = []
    while not out_of_budget:
        exp = search.ask()
        if exp is None:
            break
        parent, ids = nodes[exp.node_id], lineage(exp.node_id)
        path = [nodes[i]["config"] for i in ids]
        if len(ids) >= depth:
            search.close(exp.node_id)
            continue
        findings = diagnose(parent["trace"], parent["config"]) if exp.node_id else []
        history = [(nodes[i]["config"], nodes[i]["tune"]) for i in ids]

        def propose(n: int) -> list[tuple]:
            return [(t.config, t.rationale, t.by) for t in transitions(
                parent["config"], findings, rng, n, bounds, reward=parent["tune"], trace=parent["trace"],
                path=history)]

        # without a finding, one child continues the config unchanged (the root's: the default config)
        queue = [] if findings else [(parent["config"], CONTINUE if exp.node_id else "the default config", "default")]
        if width > len(queue):
            queue += propose(width - len(queue))
        tried: set[str] = set()
        added = probes = 0
        refilled = False
        while queue and added < width:
            cfg, why, by = queue.pop(0)
            key = config_key(path + [cfg])
            if key in tried or search.find(key) is not None:
                continue
            tried.add(key)
            # a config that samples or scores differently is first probed: one step's sampling from the parent
            check = sampling_changed(parent["config"], cfg)
            if not budget.fits(session.spent - start, cfg, steps=cfg.steps + check):
                out_of_budget = True
                break
            label = {"node": len(search), "parent": exp.node_id, "depth": len(ids) + 1, "why": why, "by": by}
            if check:
                if probes >= MAX_PROBES_PER_EXPANSION:
                    continue
                probes += 1
                probe = session.probe_signal(parent["state"], cfg, seed * 1000 + len(search), label=label)
                if not probe.learnable:
                    notes.append(f"node {exp.node_id}: not applied ({why}): {probe.describe()}")
                    if not queue and not refilled:  # the proposer's next offers, once per expansion
                        queue, refilled = propose(width + len(tried)), True
                    continue
            node_id = search.add_child(exp.node_id, key, payload={"depth": len(ids) + 1})
            added += 1
            result = session.run_stage(parent["state"], cfg, seed * 1000 + node_id, label=label | {"node": node_id})
            nodes[node_id] = {"parent": exp.node_id, "state": result.state, "trace": result.trace, "config": cfg,
                              "tune": result.tune_reward, "why": why}
            search.tell(node_id, Outcome("correct", session.value(result.tune_reward)))
            share = zero_variance_share(result.trace)
            if share is not None and share >= NO_SIGNAL_SHARE:  # it learned (almost) nothing: not expanded
                search.close(node_id)
                notes.append(f"node {node_id}: closed: {share:.0%} of its groups had no reward variance ({why})")
        if not added and not out_of_budget:
            search.close(exp.node_id)
    best_id = max((n for n in nodes if n != 0), key=lambda n: (nodes[n]["tune"], -n), default=0)
    best, ids = nodes[best_id], lineage(best_id)
    return Schedule("tree", [nodes[i]["config"] for i in ids], best["tune"], best["state"], search.n_evals,
                    traces=[nodes[i]["trace"] for i in ids], reasons=[nodes[i]["why"] for i in ids], notes=notes)


METHODS = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")


def run_method(method: str, session: Session, budget: Budget, depth: int, seed: int = 0,
               transitions=None) -> Schedule:
    """One method's best schedule within ``budget``, schedules at most ``depth`` stages, with its
    test reward and what it spent (``compute``)."""
    stages = budget.stages(session.default_config())  # default stages the budget buys
    if stages < depth:
        raise UserError(f"a budget of {budget.amount:,} {budget.unit} buys {stages} default stages, below the "
                        f"schedule depth {depth}")
    before, groups = session.spent, session.groups
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
    schedule.test_reward = session.test_reward(schedule.state)
    schedule.compute = session.spent - before
    schedule.groups = session.groups - groups
    return schedule
