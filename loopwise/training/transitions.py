"""The expert's stage-to-stage transitions: diagnosis findings in, the next stage's configs out.

The rules combine every finding's suggested knob moves into *one* coordinated multi-parameter
change (a knob two findings disagree on goes the way of the higher-scored one), step each knob by
its :data:`STEPS` rule (multiplicative for rates and sizes, additive for clip ranges and the
difficulty) and keep it inside :class:`Bounds`. Siblings for the tree search are seeded variations
of the coordinated move (half or double steps, one knob left out, the top finding alone), then
single-knob moves, every knob either way. Without a finding (or with none answerable within the
bounds) there is no coordinated move: the single-knob moves, in seeded order, are all there is, and
the search itself offers to continue with the config unchanged. No rule prefers a direction for a
class of knobs, so :func:`directions`, which classifies a path's knob trajectories, and
:func:`path_directions`, which counts them over every path a search expanded, report what the
findings and the search chose (LLMZero reports capacity knobs growing and regularization knobs
oscillating; here that is a result to check, not a rule).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Literal

from pydantic import ValidationError

from loopwise.core.records import Finding
from loopwise.training.config import CAPACITY, REGULARIZATION, StageConfig
from loopwise.training.findings import suggests

__all__ = ["DIRECTIONS", "STEPS", "Bounds", "Step", "Transition", "directions", "path_directions",
           "propose_transitions"]

Plan = dict[str, tuple[str, str]]  # knob -> (direction, why: a finding's kind or "explore")


@dataclass(frozen=True)
class Step:
    """How one knob moves one step.

    Attributes:
        mode: ``mul`` (times ``size`` up, divided by it down) or ``add`` (plus/minus ``size``).
        size: the factor (> 1) or the increment.
        start: for a ``mul`` knob that may be 0 (a loss coefficient): the value an up-step from 0
            takes, and below which a down-step switches the term off.
        integer: whether the knob is an integer (rounded; a step always moves it by at least 1).
    """

    mode: Literal["mul", "add"]
    size: float
    start: float = 0.0
    integer: bool = False

    def move(self, value: float, direction: str, scale: float = 1.0) -> float:
        """The value one step (``scale`` times as large) away from ``value``."""
        sign = 1 if direction == "up" else -1
        if self.mode == "add":
            new = value + sign * self.size * scale
        elif value == 0:
            new = self.start if sign > 0 else 0.0
        else:
            new = value * self.size ** (sign * scale)
            if sign < 0 and new < self.start:
                new = 0.0
        if self.integer:
            new = round(new)
            return new if new != value else value + sign
        return float(f"{new:.4g}")  # 3e-4 * 2 ** 0.5 is a setting, not 17 digits


STEPS: Mapping[str, Step] = MappingProxyType({
    "learning_rate": Step("mul", 2.0),
    "beta": Step("mul", 2.0, start=1e-3),  # DeepSeek-R1's beta and verl's kl_loss_coef default (FACTS 8)
    "entropy_coef": Step("mul", 2.0, start=1e-3),  # verl PR #781: 0.001 could already explode; no larger
    "temperature": Step("mul", 1.25),
    "epsilon": Step("add", 0.05),
    "epsilon_high": Step("add", 0.05),
    "max_completion_length": Step("mul", 2.0, integer=True),
    "num_generations": Step("mul", 2.0, integer=True),
    "difficulty": Step("add", 1, integer=True),
})


@dataclass(frozen=True)
class Bounds:
    """Per-knob ``(min, max)`` a transition may move a knob within (defaults for tiny models).

    A knob already outside its range is never pushed further out, nor pulled in against the
    direction it was asked to move. The difficulty's maximum is the task's: use :meth:`for_task`.
    """

    learning_rate: tuple[float, float] = (1e-5, 3e-3)
    beta: tuple[float, float] = (0.0, 0.2)
    entropy_coef: tuple[float, float] = (0.0, 0.05)
    epsilon: tuple[float, float] = (0.1, 0.3)
    epsilon_high: tuple[float, float] = (0.2, 0.4)  # around DAPO's clip-higher 0.28
    temperature: tuple[float, float] = (0.5, 2.0)
    max_completion_length: tuple[int, int] = (4, 256)
    num_generations: tuple[int, int] = (2, 32)
    difficulty: tuple[int, int] = (0, 20)

    def __post_init__(self) -> None:
        for f in fields(self):
            lo, hi = getattr(self, f.name)
            if lo > hi:
                raise ValueError(f"bounds for {f.name}: min {lo} is above max {hi}")

    @classmethod
    def for_task(cls, max_difficulty: int, **overrides: tuple[float, float]) -> Bounds:
        """Default bounds with the task's difficulty range ``0..max_difficulty``."""
        return cls(difficulty=(0, max_difficulty), **overrides)

    def limit(self, knob: str, old: float, new: float) -> float:
        """``new`` kept within the knob's range on the side it moved towards."""
        lo, hi = getattr(self, knob)
        if new > old:
            return min(new, hi) if old < hi else old
        if new < old:
            return max(new, lo) if old > lo else old
        return old


@dataclass(frozen=True)
class Transition:
    """One proposed next stage.

    Attributes:
        config: the next stage's config.
        changes: ``{knob: (old, new)}`` for every knob that changed.
        rationale: one sentence naming the findings it answers (or the prior it follows).
        by: who proposed it: ``expert`` (the rules), ``llm`` or ``exchange`` (a model), or
            ``rule fallback`` (the rules filling in for replies that could not be used).
    """

    config: StageConfig
    changes: Mapping[str, tuple]
    rationale: str
    by: str = "expert"

    def __post_init__(self) -> None:
        object.__setattr__(self, "changes", MappingProxyType(dict(self.changes)))


def _plan_from(findings: Sequence[Finding]) -> Plan:
    plan: Plan = {}
    for finding in sorted(findings, key=lambda f: -f.score):  # stable: ties keep the caller's order
        for knob, direction in suggests(finding).items():
            plan.setdefault(knob, (direction, finding.tool))
    return plan


def _build(config: StageConfig, plan: Plan, scale: float, bounds: Bounds) -> StageConfig | None:
    """The config after the plan's moves, or None when nothing moved or the result is invalid."""
    current = config.model_dump()
    updates = {k: bounds.limit(k, current[k], STEPS[k].move(current[k], d, scale)) for k, (d, _) in plan.items()}
    updates = {k: v for k, v in updates.items() if v != current[k]}
    if not updates:
        return None
    try:
        return StageConfig(**(current | updates))
    except ValidationError:  # e.g. a clip range the config rejects: not a candidate, not a crash
        return None


def _variants(plan: Plan, findings: Sequence[Finding]) -> list[tuple[Plan, float, str]]:
    out: list[tuple[Plan, float, str]] = [(plan, 0.5, "half steps"), (plan, 2.0, "double steps")]
    if len(plan) > 1:
        out += [({k: v for k, v in plan.items() if k != knob}, 1.0, f"without {knob}") for knob in plan]
        top = max(findings, key=lambda f: f.score).tool if findings else "explore"
        only = {k: v for k, v in plan.items() if v[1] == top}
        if only and len(only) < len(plan):
            out.append((only, 1.0, f"{top} only"))
    return out


def _singles() -> list[tuple[Plan, float, str]]:
    """One-knob moves, every knob either way."""
    return [({k: (d, "explore")}, 1.0, "") for k in CAPACITY + REGULARIZATION for d in ("up", "down")]


def _rationale(plan: Plan, changes: Mapping[str, tuple], note: str) -> str:
    reasons = list(dict.fromkeys(reason for knob, (_, reason) in plan.items() if knob in changes))
    answered = [r for r in reasons if r != "explore"]
    head = f"Answers {', '.join(answered)}" if answered else "Explores one knob (no finding asks for this move)"
    moves = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changes.items())
    return f"{head}{f' ({note})' if note else ''}: {moves}."


def propose_transitions(config: StageConfig, findings: list[Finding], rng: random.Random, n: int = 2,
                        bounds: Bounds | None = None) -> list[Transition]:
    """The next stage's configs for a checkpoint, best guess first.

    Args:
        config: the stage just trained.
        findings: its diagnosis (:func:`loopwise.training.diagnose.diagnose`); may be empty.
        rng: the seeded generator that orders the sibling variations.
        n: how many distinct transitions are wanted (0 gives none).
        bounds: the knobs' ranges; :class:`Bounds` defaults when None.

    Returns:
        Up to ``n`` transitions with distinct configs, none equal to ``config``; the first is the
        coordinated rule-based move when a finding can be answered within the bounds, else a
        single-knob move in seeded order. Only when no knob can move at all is the unchanged
        config returned, once.
    """
    if n < 0:
        raise ValueError(f"n must not be negative, got {n}")
    if n == 0:
        return []
    bounds = bounds or Bounds()
    plan, note = _plan_from(findings), ""
    if _build(config, plan, 1.0, bounds) is None:
        asking = [f.tool for f in findings if f.moves]  # a finding without moves asks for nothing
        if asking:  # every answer to them is at its bound: say so, and explore instead
            note = f"{', '.join(asking)} cannot be answered within bounds"
        plan = {}
    variants, singles = (_variants(plan, findings) if plan else []), _singles()
    rng.shuffle(variants)
    rng.shuffle(singles)
    out: list[Transition] = []
    seen = {config}
    for candidate, scale, label in [(plan, 1.0, "")] + variants + singles:
        new = _build(config, candidate, scale, bounds) if candidate else None
        if new is None or new in seen:
            continue
        seen.add(new)
        changes = config.changed(new)
        rationale = _rationale(candidate, changes, "; ".join(filter(None, (label, note))))
        out.append(Transition(new, changes, rationale))
        if len(out) == n:
            break
    return out or [Transition(config, {}, "Nothing can change: every knob is at the bound it would move past.")]


DIRECTIONS = ("monotone_up", "monotone_down", "oscillating", "constant")


def _trajectory(values: Sequence) -> tuple[str, int]:
    """How a knob's values moved along a path, and how many times it changed."""
    signs = [1 if b > a else -1 for a, b in itertools.pairwise(values) if b != a]
    # with stays dropped, a path that both rises and falls must reverse somewhere
    kind = ("constant" if not signs else "oscillating" if len(set(signs)) == 2
            else "monotone_up" if signs[0] == 1 else "monotone_down")
    return kind, len(signs)


def _values(configs: Sequence, knob: str) -> list:
    return [c.get(knob) if isinstance(c, Mapping) else getattr(c, knob) for c in configs]


def directions(configs: Sequence[StageConfig | Mapping]) -> dict[str, str]:
    """How each knob moved along a path of stage configs (its start first), read from records or
    from their dicts.

    Returns:
        ``{knob: "monotone_up" | "monotone_down" | "oscillating" | "constant"}`` for every
        capacity and regularization knob; a knob that reverses direction at least once (ignoring
        stages where it stays put) is oscillating, so telling one needs a path of two moves.
    """
    return {knob: _trajectory(_values(configs, knob))[0] for knob in CAPACITY + REGULARIZATION}


def path_directions(paths: Sequence[Sequence[StageConfig | Mapping]]) -> dict:
    """:func:`directions` over many paths (each its start config first), counted.

    Returns:
        ``paths`` (how many), ``moves`` (paths by their number of moves, as text keys),
        ``long_enough`` (paths of at least two moves: the fewest in which any knob can reverse) and
        ``knobs``: per knob, the paths in each of :data:`DIRECTIONS` and ``moved_twice``, the paths
        in which that knob changed at least twice (only those can show it oscillating).
    """
    knobs = {k: dict.fromkeys(DIRECTIONS + ("moved_twice",), 0) for k in CAPACITY + REGULARIZATION}
    moves: dict[str, int] = {}
    for path in paths:
        n = max(len(path) - 1, 0)
        moves[str(n)] = moves.get(str(n), 0) + 1
        for knob, counts in knobs.items():
            kind, changes = _trajectory(_values(path, knob))
            counts[kind] += 1
            counts["moved_twice"] += changes >= 2
    return {"paths": len(paths), "moves": dict(sorted(moves.items(), key=lambda kv: int(kv[0]))),
            "long_enough": sum(len(p) >= 3 for p in paths), "knobs": knobs}
