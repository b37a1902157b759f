"""What a training search's report reads from its run: each method's schedule, the stage tree,
the settings and the base policy, and how their numbers are written in the report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loopwise.training import metrics as M
from loopwise.training.compute import Compute, StageTally, stage_compute

KNOBS = ("learning_rate", "beta", "temperature", "difficulty", "max_completion_length", "num_generations",
         "entropy_coef", "epsilon_high")
PANELS = (M.ENTROPY, M.KL, M.FRAC_ZERO_STD, M.CLIPPED, M.CLIP_LOW, M.CLIP_HIGH, M.CLIP_REGION, M.LENGTH)
METHOD_COLORS = {"tree": "#0969da", "fixed": "#57606a", "staged": "#bf8700", "grid": "#1a7f37",
                 "random": "#8250df"}
STAGE_COLORS = ("#0969da", "#bf8700", "#1a7f37", "#cf222e", "#8250df", "#57606a", "#1b7c83", "#953800")
ARROWS = {"monotone_up": "↑", "monotone_down": "↓", "oscillating": "↕", "constant": "="}


@dataclass
class Schedule:
    """A method's best schedule: from its ``result`` event, or the best one its stages make so far."""

    method: str
    configs: list[dict]
    traces: list[list[dict]]
    tune: float | None
    test: float | None = None
    stages_used: int | None = None
    directions: dict = field(default_factory=dict)
    done: bool = False
    compute: Compute | None = None  # samples and tokens of every stage the method trained
    trained: dict = field(default_factory=dict)  # those stages counted, cut and run-on ones apart (StageTally's)
    reasons: list[str] = field(default_factory=list)  # per stage, why its config was chosen (the tree's)


@dataclass
class TrainingData:
    """Everything the report reads from one run's events."""
    settings: dict
    base: dict
    stages: list[dict]
    results: dict[str, dict]
    schedules: dict[str, Schedule] = field(default_factory=dict)
    decisions: list[tuple[str, dict]] = field(default_factory=list)  # the model's proposals, failures, re-prompts

    @property
    def methods(self) -> list[str]:
        seen = [m for m in as_list(self.settings.get("methods")) if isinstance(m, str)]
        for m in list(self.results) + [s.get("method") for s in self.stages]:
            if isinstance(m, str) and m not in seen:
                seen.append(m)
        return seen

    @property
    def tree(self) -> dict[int, dict]:
        """The tree's stages by node id (node 0, the base, has no stage)."""
        return {s["node"]: s for s in self.stages if s.get("method") == "tree" and type(s.get("node")) is int}


DECISIONS = ("proposal", "proposal_failed", "reprompt", "fallback")  # a model's transitions, as recorded


def decision_counts(decisions: list[tuple[str, dict]]) -> dict:
    """A model's transitions counted, as the kernels summary counts its proposals: replies used,
    failed ones by reason (with the first detail of each), re-prompts, and the steps where the rules
    filled in (``fallbacks``) with the transitions they gave (``from_rules``)."""
    failed: dict[str, int] = {}
    first: dict[str, str] = {}
    for kind, p in decisions:
        if kind == "proposal_failed":
            reason = str(p.get("reason", "?"))
            failed[reason] = failed.get(reason, 0) + 1
            first.setdefault(reason, str(p.get("detail", "")))
    fallbacks = [p for kind, p in decisions if kind == "fallback"]
    return {"answered": sum(kind == "proposal" for kind, _ in decisions), "failed": failed, "first_failure": first,
            "reprompts": sum(kind == "reprompt" for kind, _ in decisions), "fallbacks": len(fallbacks),
            "from_rules": sum(int(as_number(p.get("from_rules")) or 0) for p in fallbacks)}


# -- reading -----------------------------------------------------------------------------------
def as_number(v) -> float | None:
    """``v`` as a finite float, or None (booleans, NaN and non-numbers are None)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def as_list(v) -> list:
    """``v`` when it is a list, else an empty one."""
    return v if isinstance(v, list) else []


def as_dict(v) -> dict:
    """``v`` when it is a dict, else an empty one."""
    return v if isinstance(v, dict) else {}


def _trace(v) -> list[dict]:
    return [row for row in as_list(v) if isinstance(row, dict)]


def rank_of(v) -> float:
    """A reward as a sort key; a missing one sorts last (0.0 is a reward, not a missing one)."""
    v = as_number(v)
    return -math.inf if v is None else v


def load_data(store) -> TrainingData:
    """Reads the run's events into :class:`TrainingData`; malformed payloads read as empty."""
    data = TrainingData({}, {}, [], {})
    for e in store.events():
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.kind == "settings":
            data.settings = p
        elif e.kind == "base":
            data.base = p
        elif e.kind == "stage":
            data.stages.append(p)
        elif e.kind == "result":
            data.results[e.key or p.get("method", "?")] = p
        elif e.kind in DECISIONS:
            data.decisions.append((e.kind, p))
    for m in data.methods:
        data.schedules[m] = _from_result(m, data.results[m], data) if m in data.results else _so_far(m, data)
    return data


def _from_result(method: str, r: dict, data: TrainingData) -> Schedule:
    samples, tokens = as_number(r.get("samples")), as_number(r.get("tokens"))
    # a result written before results carried their compute: the method's stage events instead
    compute = Compute(int(samples), int(tokens)) if samples is not None and tokens is not None else _spent(method, data)
    return Schedule(method, [as_dict(c) for c in as_list(r.get("configs"))], [_trace(t) for t in as_list(r.get("traces"))],
                    as_number(r.get("tune_reward")), as_number(r.get("test_reward")), r.get("stages_used"),
                    {str(k): str(v) for k, v in as_dict(r.get("directions")).items()}, True, compute,
                    reasons=[str(x) for x in as_list(r.get("reasons"))],
                    trained=as_dict(r.get("trained")) or _trained(method, data))


def _spent(method: str, data: TrainingData) -> Compute:
    """Samples and tokens of the method's stage events."""
    total = Compute()
    for s in data.stages:
        if s.get("method") == method:
            total = total + stage_compute(s.get("trace"), s.get("config"))
    return total


def _trained(method: str, data: TrainingData) -> dict:
    """The method's stage events counted as :class:`~loopwise.training.compute.StageTally` counts
    them (an event without ``planned_steps`` ran its planned steps)."""
    total = StageTally()
    for s in data.stages:
        ran = as_number(as_dict(s.get("config")).get("steps"))
        if s.get("method") == method and ran is not None:
            planned = as_number(s.get("planned_steps"))
            total = total + StageTally.of(int(ran if planned is None else planned), int(ran))
    return total.to_dict()


def parent_of(tree: dict[int, dict], n: int) -> int:
    """A node's parent; one the log does not hold (a malformed run) hangs from the base."""
    p = tree[n].get("parent", 0)
    return p if type(p) is int and p in tree and p != n else 0


def tree_path(tree: dict[int, dict], node: int) -> list[dict]:
    """The tree's stages from its first stage down to ``node``."""
    path, seen = [], set()
    while node in tree and node not in seen:  # `seen`: a malformed log must not loop forever
        seen.add(node)
        path.append(tree[node])
        node = parent_of(tree, node)
    return path[::-1]


def _so_far(method: str, data: TrainingData) -> Schedule:
    """An unfinished method's best schedule by tuning reward among the stages it has trained."""
    if method == "tree":
        tree = data.tree
        best = max(tree, key=lambda n: (rank_of(tree[n].get("tune")), -n), default=None)
        path = tree_path(tree, best) if best is not None else []
    else:
        reps: dict = {}
        for s in data.stages:
            if s.get("method") == method:
                reps.setdefault(str(s.get("rep")), []).append(s)
        runs = [sorted(r, key=lambda s: as_number(s.get("stage")) or 0) for r in reps.values()]
        path = max(runs, key=lambda r: rank_of(r[-1].get("tune")), default=[])
    return Schedule(method, [as_dict(s.get("config")) for s in path], [_trace(s.get("trace")) for s in path],
                    as_number(path[-1].get("tune")) if path else None,
                    stages_used=sum(1 for s in data.stages if s.get("method") == method), compute=_spent(method, data),
                    reasons=[str(s["why"]) for s in path if isinstance(s.get("why"), str)],
                    trained=_trained(method, data))


# -- formatting ---------------------------------------------------------------------------------
def budget_text(data: TrainingData) -> str:
    """Each method's budget: from a result, else the settings (samples or tokens asked for, else
    ``budget`` default stages counted in samples)."""
    for r in data.results.values():
        b = as_dict(r.get("budget"))
        if isinstance(b.get("amount"), int) and b.get("unit") in ("samples", "tokens"):
            return f"{b['amount']:,} {b['unit']} per method"
    st = data.settings
    for unit in ("samples", "tokens"):
        if isinstance(st.get(f"budget_{unit}"), int):
            return f"{st[f'budget_{unit}']:,} {unit} per method"
    return f"{st.get('budget', '?')} default stages' samples per method"


def base_test_reward(data: TrainingData) -> float | None:
    """The base's test reward: every method's result carries the same one; none before a result."""
    return next((as_number(r.get("base_test_reward")) for r in data.results.values()), None)


def fmt(v, digits: int = 3) -> str:
    """A number with ``digits`` decimals, ``-`` for none."""
    v = as_number(v)
    return "-" if v is None else f"{v:.{digits}f}"


def value_text(v) -> str:
    """A knob's value; a knob the config leaves unset (a task without difficulty) is "-"."""
    return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def count_text(v: int | None) -> str:
    """A count with thousands separators, ``-`` for none."""
    return "-" if v is None else f"{v:,}"


def delta_text(v, ref) -> str:
    """``v - ref`` with its relative change, ``-`` when either is missing."""
    v, ref = as_number(v), as_number(ref)
    if v is None or ref is None:
        return "-"
    rel = f" ({(v - ref) / abs(ref):+.1%})" if ref else ""
    return f"{v - ref:+.3f}{rel}"


def changes_text(old: dict, new: dict) -> str:
    """The knobs ``new`` changes from ``old``, as ``knob old→new`` pairs."""
    diff = [f"{k} {value_text(old[k])}→{value_text(new[k])}" for k in new if k in old and old[k] != new[k]]
    return ", ".join(diff) or "no change"


def stages_text(used, trained) -> str:
    """A method's stages as they ran: ``used`` (in default stages: a run of a run-based method
    stands for several) with those an allowance cut short or ran past their planned steps, from
    ``trained`` (:class:`~loopwise.training.compute.StageTally`'s dict; a result written before
    it has none): ``5 + 1 cut``, or ``8 (2 runs: 1 cut short, 1 longer than planned)``."""
    used = as_number(used)
    if used is None:
        return "-"
    t = {k: int(as_number(as_dict(trained).get(k)) or 0) for k in ("stages", "cut", "longer")}
    if not (t["cut"] or t["longer"]):
        return f"{used:.0f}"
    if t["stages"] == used and not t["longer"]:
        return f"{used - t['cut']:.0f} + {t['cut']} cut"
    parts = [f"{t['cut']} cut short"] * bool(t["cut"]) + [f"{t['longer']} longer than planned"] * bool(t["longer"])
    runs = "" if t["stages"] == used else f"{t['stages']} runs: "
    return f"{used:.0f} ({runs}{', '.join(parts)})"


def schedule_summary(s: Schedule) -> str:
    """A schedule in one line: its length and the knobs that move along it (or the one config's)."""
    if not s.configs:
        return "-"
    steps = "+".join(str(c.get("steps", "?")) for c in s.configs)
    if len(s.configs) == 1:
        c = s.configs[0]
        return f"1 stage ({steps} steps): " + ", ".join(f"{k}={value_text(c[k])}" for k in KNOBS[:3] if c.get(k) is not None)
    moves = [f"{k} " + "→".join(value_text(c.get(k)) for c in s.configs) for k in s.configs[0]
             if k != "steps" and len({repr(c.get(k)) for c in s.configs}) > 1]
    return f"{len(s.configs)} stages ({steps} steps): " + ("; ".join(moves) or "the same config throughout")


def tree_paths(tree: dict[int, dict]) -> list[list[dict]]:
    """Every node's path of configs from the default config (the base's first child's, as
    tree_search proposes it first) down to the node."""
    first = min((n for n in tree if parent_of(tree, n) == 0), default=None)
    if first is None:
        return []
    start = as_dict(tree[first].get("config"))
    return [[start] + [as_dict(s.get("config")) for s in tree_path(tree, n)] for n in sorted(tree)]


def moves_text(counts: dict) -> str:
    """:func:`~loopwise.training.transitions.path_directions`' paths by their number of moves, and
    how many are long enough for a knob to reverse."""
    moves = as_dict(counts.get("moves"))
    by = ", ".join(f"{n} move{'' if n == '1' else 's'}: {k}" for n, k in moves.items())
    return (f"{by or 'no path'}; {counts.get('long_enough', 0)} of the {counts.get('paths', 0)} paths have the two "
            "or more moves a reversal needs")


def top_finding(stage: dict) -> str:
    """The stage's highest-scored diagnosis, when the event carries one (older runs' events do not);
    else its recorded diagnosis status ("no finding", or why it was not judged)."""
    for key in ("diagnosis", "findings", "finding"):
        found = stage.get(key)
        items = found if isinstance(found, list) else [found] if found else []
        if items:
            top = max(items, key=lambda f: as_number(f.get("score")) or 0.0 if isinstance(f, dict) else 0.0)
            if isinstance(top, dict):
                return f"{top.get('kind', 'finding')}: {top.get('guidance', '')}".strip(": ")
            return str(top)
    status = stage.get("diagnosis_status")
    return status if isinstance(status, str) else ""
