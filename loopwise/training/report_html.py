"""HTML report of a training search (``loopwise report RUN`` on a ``training.search`` run): each
method's best schedule against the base and the grid, its reward curve across stages, the stage tree
coloured by tuning reward, the knobs' trajectories and directions, and the best tree schedule's
other metrics. Reads whatever events are there, so an unfinished run or a baselines-only run reports
too (a method without a ``result`` shows its best schedule so far)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from loopwise.core.report import Figure, Section, render_html
from loopwise.training import metrics as M
from loopwise.training.compute import Compute, stage_compute

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


@dataclass
class TrainingData:
    settings: dict
    base: dict
    stages: list[dict]
    results: dict[str, dict]
    schedules: dict[str, Schedule] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        seen = [m for m in _list(self.settings.get("methods")) if isinstance(m, str)]
        for m in list(self.results) + [s.get("method") for s in self.stages]:
            if isinstance(m, str) and m not in seen:
                seen.append(m)
        return seen

    @property
    def tree(self) -> dict[int, dict]:
        """The tree's stages by node id (node 0, the base, has no stage)."""
        return {s["node"]: s for s in self.stages if s.get("method") == "tree" and type(s.get("node")) is int}


# -- reading -----------------------------------------------------------------------------------
def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _trace(v) -> list[dict]:
    return [row for row in _list(v) if isinstance(row, dict)]


def _rank(v) -> float:
    """A reward as a sort key; a missing one sorts last (0.0 is a reward, not a missing one)."""
    v = _num(v)
    return -math.inf if v is None else v


def _load(store) -> TrainingData:
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
    for m in data.methods:
        data.schedules[m] = _from_result(m, data.results[m], data) if m in data.results else _so_far(m, data)
    return data


def _from_result(method: str, r: dict, data: TrainingData) -> Schedule:
    samples, tokens = _num(r.get("samples")), _num(r.get("tokens"))
    # a result written before results carried their compute: the method's stage events instead
    compute = Compute(int(samples), int(tokens)) if samples is not None and tokens is not None else _spent(method, data)
    return Schedule(method, [_dict(c) for c in _list(r.get("configs"))], [_trace(t) for t in _list(r.get("traces"))],
                    _num(r.get("tune_reward")), _num(r.get("test_reward")), r.get("stages_used"),
                    {str(k): str(v) for k, v in _dict(r.get("directions")).items()}, True, compute)


def _spent(method: str, data: TrainingData) -> Compute:
    """Samples and tokens of the method's stage events."""
    total = Compute()
    for s in data.stages:
        if s.get("method") == method:
            total = total + stage_compute(s.get("trace"), s.get("config"))
    return total


def _tree_path(tree: dict[int, dict], node: int) -> list[dict]:
    path, seen = [], set()
    while node in tree and node not in seen:  # `seen`: a malformed log must not loop forever
        seen.add(node)
        path.append(tree[node])
        node = _parent(tree, node)
    return path[::-1]


def _so_far(method: str, data: TrainingData) -> Schedule:
    """An unfinished method's best schedule by tuning reward among the stages it has trained."""
    if method == "tree":
        tree = data.tree
        best = max(tree, key=lambda n: (_rank(tree[n].get("tune")), -n), default=None)
        path = _tree_path(tree, best) if best is not None else []
    else:
        reps: dict = {}
        for s in data.stages:
            if s.get("method") == method:
                reps.setdefault(str(s.get("rep")), []).append(s)
        runs = [sorted(r, key=lambda s: _num(s.get("stage")) or 0) for r in reps.values()]
        path = max(runs, key=lambda r: _rank(r[-1].get("tune")), default=[])
    return Schedule(method, [_dict(s.get("config")) for s in path], [_trace(s.get("trace")) for s in path],
                    _num(path[-1].get("tune")) if path else None,
                    stages_used=sum(1 for s in data.stages if s.get("method") == method), compute=_spent(method, data))


# -- formatting ---------------------------------------------------------------------------------
def _budget(data: TrainingData) -> str:
    """Each method's budget: from a result, else the settings (samples or tokens asked for, else
    ``budget`` default stages counted in samples)."""
    for r in data.results.values():
        b = _dict(r.get("budget"))
        if isinstance(b.get("amount"), int) and b.get("unit") in ("samples", "tokens"):
            return f"{b['amount']:,} {b['unit']} per method"
    st = data.settings
    for unit in ("samples", "tokens"):
        if isinstance(st.get(f"budget_{unit}"), int):
            return f"{st[f'budget_{unit}']:,} {unit} per method"
    return f"{st.get('budget', '?')} default stages' samples per method"


def _base_test(data: TrainingData) -> float | None:
    """The base's test reward: every method's result carries the same one; none before a result."""
    return next((_num(r.get("base_test_reward")) for r in data.results.values()), None)


def _fmt(v, digits: int = 3) -> str:
    v = _num(v)
    return "-" if v is None else f"{v:.{digits}f}"


def _val(v) -> str:
    """A knob's value; a knob the config leaves unset (a task without difficulty) is "-"."""
    return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def _count(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _delta(v, ref) -> str:
    v, ref = _num(v), _num(ref)
    if v is None or ref is None:
        return "-"
    rel = f" ({(v - ref) / abs(ref):+.1%})" if ref else ""
    return f"{v - ref:+.3f}{rel}"


def _changes(old: dict, new: dict) -> str:
    diff = [f"{k} {_val(old[k])}→{_val(new[k])}" for k in new if k in old and old[k] != new[k]]
    return ", ".join(diff) or "no change"


def _summary(s: Schedule) -> str:
    """A schedule in one line: its length and the knobs that move along it (or the one config's)."""
    if not s.configs:
        return "-"
    steps = "+".join(str(c.get("steps", "?")) for c in s.configs)
    if len(s.configs) == 1:
        c = s.configs[0]
        return f"1 stage ({steps} steps): " + ", ".join(f"{k}={_val(c[k])}" for k in KNOBS[:3] if c.get(k) is not None)
    moves = [f"{k} " + "→".join(_val(c.get(k)) for c in s.configs) for k in s.configs[0]
             if k != "steps" and len({repr(c.get(k)) for c in s.configs}) > 1]
    return f"{len(s.configs)} stages ({steps} steps): " + ("; ".join(moves) or "the same config throughout")


def _top_finding(stage: dict) -> str:
    """The stage's highest-scored diagnosis, when the event carries one (older runs' events do not)."""
    for key in ("diagnosis", "findings", "finding"):
        found = stage.get(key)
        items = found if isinstance(found, list) else [found] if found else []
        if items:
            top = max(items, key=lambda f: _num(f.get("score")) or 0.0 if isinstance(f, dict) else 0.0)
            if isinstance(top, dict):
                return f"{top.get('kind', 'finding')}: {top.get('guidance', '')}".strip(": ")
            return str(top)
    return ""


# -- figures ------------------------------------------------------------------------------------
def _headline_rows(data: TrainingData) -> list[list[str]]:
    grid, base_test = data.schedules.get("grid"), _base_test(data)
    rows = []
    for m, s in data.schedules.items():
        status = "done" if s.done else ("unfinished" if s.configs else "not started")
        c = s.compute
        rows.append([m, status, str(s.stages_used if s.stages_used is not None else "-"),
                     _count(c.samples if c else None), _count(c.tokens if c else None), _fmt(s.tune), _fmt(s.test),
                     _delta(s.test, base_test), _delta(s.test, grid.test) if grid and m != "grid" else "-",
                     _summary(s)])
    return rows


HEADLINE_COLUMNS = ["method", "status", "stages", "samples", "tokens", "tune reward", "test reward", "test vs base",
                    "test vs grid", "best schedule"]


def _headline(data: TrainingData, rows: list[list[str]]) -> Figure:
    """The methods' table over bars of their tuning and test rewards, the base's marked."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, specs=[[{"type": "table"}], [{"type": "xy"}]], row_heights=[0.55, 0.45],
                        vertical_spacing=0.04)
    cells = [list(col) for col in zip(*rows)] if rows else [[] for _ in HEADLINE_COLUMNS]
    fig.add_trace(go.Table(header={"values": HEADLINE_COLUMNS, "align": "left", "fill_color": "#f3f5f7"},
                           cells={"values": cells, "align": "left", "height": 24},
                           columnwidth=[1, 1, 0.7, 0.9, 0.9, 0.9, 0.9, 1.3, 1.3, 5]), row=1, col=1)
    methods = list(data.schedules)
    for name, attr, color in (("tune", "tune", "#8c959f"), ("test", "test", "#0969da")):
        fig.add_bar(x=methods, y=[getattr(data.schedules[m], attr) for m in methods], name=f"{name} reward",
                    marker_color=color, row=2, col=1)
    for ref, name, dash in ((_num(data.base.get("tune")), "base tune", "dot"), (_base_test(data), "base test", "dash")):
        if ref is not None and methods:  # a line across the bars (add_hline fails next to a table)
            fig.add_scatter(x=methods, y=[ref] * len(methods), mode="lines", name=f"{name} reward",
                            line={"color": "#cf222e", "dash": dash, "width": 1, "shape": "hvh"}, row=2, col=1)
    fig.update_layout(margin={"t": 10, "l": 10, "r": 10, "b": 10}, barmode="group", legend={"x": 1.0, "y": 0.4})
    return Figure("Methods at an equal compute budget (best schedule each, picked by tuning reward)", fig)


def _stitched(traces: list[list[dict]]):
    """Each stage's rows with a step count running across stages, and where the stages end."""
    offset, rows, ends = 0, [], []
    for i, trace in enumerate(traces):
        last = offset
        for row in trace:
            x = offset + (_num(row.get(M.STEP)) or 0)
            rows.append((i, x, row))
            last = max(last, x)
        ends.append(last)
        offset = last
    return rows, ends


def _reward_curves(data: TrainingData) -> Figure:
    import plotly.graph_objects as go

    fig, base = go.Figure(), _num(data.base.get("tune"))
    for m, s in data.schedules.items():
        if not s.traces:
            continue
        rows, ends = _stitched(s.traces)
        color = METHOD_COLORS.get(m, "#1d2228")
        train = [(x, r[M.REWARD]) for _, x, r in rows if _num(r.get(M.REWARD)) is not None]
        held = ([(0, base)] if base is not None else []) + [(x, r[M.EVAL_REWARD]) for _, x, r in rows
                                                            if _num(r.get(M.EVAL_REWARD)) is not None]
        fig.add_scatter(x=[p[0] for p in train], y=[p[1] for p in train], mode="lines", name=f"{m}: train reward",
                        legendgroup=m, line={"color": color, "width": 1.2}, opacity=0.75)
        fig.add_scatter(x=[p[0] for p in held], y=[p[1] for p in held], mode="lines+markers", legendgroup=m,
                        name=f"{m}: held-out (tune) at stage ends", line={"color": color, "dash": "dot"},
                        marker={"symbol": "diamond", "size": 9})
        for x in ends[:-1]:
            fig.add_vline(x=x, line={"color": color, "dash": "dash", "width": 1}, opacity=0.35)
    fig.update_layout(xaxis_title="training step (stages concatenated; dashed lines = stage boundaries)",
                      yaxis_title="reward", margin={"t": 20}, legend={"font": {"size": 10}})
    return Figure("Reward along each method's best schedule", fig)


def _parent(tree: dict[int, dict], n: int) -> int:
    """A node's parent; one the log does not hold (a malformed run) hangs from the base."""
    p = tree[n].get("parent", 0)
    return p if type(p) is int and p in tree and p != n else 0


def _layout(tree: dict[int, dict]) -> tuple[dict[int, int], dict[int, float]]:
    """Depth and y of every node: leaves in depth-first order, a parent at the mean of its children."""
    children: dict[int, list[int]] = {}
    for n in sorted(tree):
        children.setdefault(_parent(tree, n), []).append(n)
    depth, ys, leaves = {}, {}, [0]

    def place(n: int, d: int) -> float:
        depth[n] = d
        kids = [k for k in children.get(n, []) if k not in depth]
        if kids:
            ys[n] = sum(place(k, d + 1) for k in kids) / len(kids)
        else:
            ys[n], leaves[0] = float(leaves[0]), leaves[0] + 1
        return ys[n]

    place(0, 0)
    for n in tree:  # a cycle in a malformed log leaves nodes unreached: put them below the rest
        if n not in depth:
            depth[n], ys[n], leaves[0] = 1, float(leaves[0]), leaves[0] + 1
    return depth, ys


def _default_config(tree: dict[int, dict]) -> dict:
    """What the base's children are described against: tree_search's first proposal at the root is
    the session's default config."""
    first = min((n for n in tree if _parent(tree, n) == 0), default=None)
    return {k: v for k, v in _dict(tree[first].get("config")).items() if k != "steps"} if first is not None else {}


def _node_change(n: int, tree: dict[int, dict], default: dict) -> str:
    p = _parent(tree, n)
    ref = _dict(tree[p].get("config")) if p else default
    return (("vs parent: " if p else "vs the default config: ") + _changes(ref, _dict(tree[n].get("config")))
            if ref else "-")


def _node_hover(n: int, s: dict, tree: dict[int, dict], default: dict) -> str:
    lines = [f"node {n} (parent {s.get('parent', 0)}, depth {s.get('depth', '?')})",
             f"tune {_fmt(s.get('tune'))} · train probe {_fmt(s.get('train'))}", _node_change(n, tree, default)]
    if finding := _top_finding(s):
        lines.append("diagnosis: " + finding)
    return "<br>".join("<br>".join(textwrap.wrap(line, 90)) for line in lines)


def _tree(data: TrainingData) -> Figure:
    import plotly.graph_objects as go

    tree, default = data.tree, _default_config(data.tree)
    depth, ys = _layout(tree)
    best = max(tree, key=lambda n: (_rank(tree[n].get("tune")), -n))
    on_best = {0} | {s["node"] for s in _tree_path(tree, best)}
    ex, ey, bx, by = [], [], [], []
    for n in tree:
        p = _parent(tree, n)
        xs, yv = (bx, by) if n in on_best and p in on_best else (ex, ey)
        xs += [depth[p], depth[n], None]
        yv += [ys[p], ys[n], None]
    tune = {n: _num(tree[n].get("tune")) for n in tree} | {0: _num(data.base.get("tune"))}
    hover = {n: _node_hover(n, tree[n], tree, default) for n in tree}
    hover[0] = f"node 0: the base (warm-started)<br>tune {_fmt(data.base.get('tune'))}"
    scored = [n for n in [0, *sorted(tree)] if tune[n] is not None]
    unscored = [n for n in [0, *sorted(tree)] if tune[n] is None]  # grey: a colour scale takes no gaps
    fig = go.Figure([
        go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#d0d7de"}, hoverinfo="skip", showlegend=False),
        go.Scatter(x=bx, y=by, mode="lines", line={"color": "#cf222e", "width": 3}, hoverinfo="skip",
                   name="best schedule")]
        + [go.Scatter(x=[depth[n] for n in ns], y=[ys[n] for n in ns], mode="markers+text", showlegend=False,
                      text=[str(n) for n in ns], textposition="top center", hovertext=[hover[n] for n in ns],
                      hoverinfo="text", marker=marker)
           for ns, marker in ((scored, {"size": 16, "color": [tune[n] for n in scored], "colorscale": "Viridis",
                                        "showscale": True, "colorbar": {"title": "tune reward"},
                                        "line": {"width": 1, "color": "#1d2228"}}),
                              (unscored, {"size": 16, "color": "#d0d7de", "line": {"width": 1, "color": "#1d2228"}}))
           if ns])
    fig.update_layout(xaxis={"title": "depth (stages from the base)", "dtick": 1}, yaxis={"visible": False},
                      margin={"t": 20}, legend={"orientation": "h", "y": -0.2})
    return Figure(f"Stage tree: {len(tree)} node{'s' * (len(tree) != 1)} + the base (colour = tuning reward; hover for the change "
                  "and the diagnosis)", fig)


def _knobs(data: TrainingData) -> Figure:
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=4, subplot_titles=KNOBS, horizontal_spacing=0.06, vertical_spacing=0.16)
    for i, knob in enumerate(KNOBS):
        for m, s in data.schedules.items():
            ys = [c.get(knob) for c in s.configs]
            fig.add_scatter(x=list(range(1, len(ys) + 1)), y=ys, mode="lines+markers", name=m, legendgroup=m,
                            showlegend=i == 0, line={"color": METHOD_COLORS.get(m, "#1d2228")},
                            row=i // 4 + 1, col=i % 4 + 1)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(dtick=1)
    fig.update_layout(margin={"t": 40}, legend={"orientation": "h", "y": -0.12})
    return Figure("Knobs per stage of each best schedule (x = stage; a continuous baseline is one long stage)", fig)


def _metrics(s: Schedule) -> Figure:
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=4, subplot_titles=PANELS, horizontal_spacing=0.06, vertical_spacing=0.16)
    rows, _ = _stitched(s.traces)
    for i, name in enumerate(PANELS):
        for stage in range(len(s.traces)):
            pts = [(x, r[name]) for j, x, r in rows if j == stage and _num(r.get(name)) is not None]
            fig.add_scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                            name=f"stage {stage + 1}", legendgroup=str(stage), showlegend=i == 0,
                            marker={"size": 3}, line={"color": STAGE_COLORS[stage % len(STAGE_COLORS)]},
                            row=i // 4 + 1, col=i % 4 + 1)
        if not any(_num(r.get(name)) is not None for _, _, r in rows):
            fig.add_annotation(text="not in the trace", showarrow=False, x=0.5, y=0.5, xref="x domain",
                               yref="y domain", font={"color": "#8c959f"}, row=i // 4 + 1, col=i % 4 + 1)
    fig.update_layout(margin={"t": 40}, legend={"orientation": "h", "y": -0.12})
    return Figure(f"Other metrics per step of the best {s.method} schedule, by stage", fig)


def _warm(history: list) -> Figure:
    import plotly.graph_objects as go

    pts = [p for p in history if isinstance(p, (list, tuple)) and len(p) == 2]
    fig = go.Figure(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers"))
    fig.update_layout(xaxis_title="supervised step", yaxis_title="sampled pass rate (tune)", margin={"t": 20})
    return Figure("Warm start of the base policy", fig)


# -- sections -----------------------------------------------------------------------------------
def _run_section(data: TrainingData, meta, rows: list[list[str]]) -> Section:
    st, warm = data.settings, _dict(data.base.get("warm"))
    base_test = _base_test(data)
    facts = {"run": meta.run_id, "task": st.get("task", "-"), "preset": st.get("preset", "-"),
             "budget / depth": f"{_budget(data)} / at most {st.get('depth', '-')} stages per schedule",
             "seed / difficulty": f"{st.get('seed', '-')} / {_difficulty(data)}",
             "base reward (tune / test)": f"{_fmt(data.base.get('tune'))} / {_fmt(base_test)}",
             "warm start": f"{warm.get('steps', '-')} steps to pass rate {_fmt(warm.get('pass_rate'))}"
                           + ("" if warm.get("in_target", True) else " (outside the target range)"),
             "stages trained": len(data.stages)}
    return Section("Methods", facts=facts, columns=HEADLINE_COLUMNS, rows=rows, anchor="methods")


def _difficulty(data: TrainingData) -> str:
    """The run's difficulty: its setting, else what its stages trained at (the task's default),
    else "-" (a task without one)."""
    chosen = data.settings.get("difficulty")
    if chosen is None:
        chosen = next((c.get("difficulty") for s in data.schedules.values() for c in s.configs), None)
    return _val(chosen)


def _directions_section(data: TrainingData) -> Section:
    have = [m for m, s in data.schedules.items() if s.directions]
    knobs = list(KNOBS) + sorted({k for m in have for k in data.schedules[m].directions} - set(KNOBS))
    rows = [[k] + [f"{ARROWS.get(d, '')} {d}".strip() for d in (data.schedules[m].directions.get(k, "-")
                                                                 for m in have)] for k in knobs]
    return Section("Knob directions along each best schedule", columns=["knob"] + have, rows=rows if have else [],
                   facts={} if have else {"directions": "none yet (a finished method of more than one stage has them)"},
                   anchor="directions")


def _schedule_section(data: TrainingData) -> Section:
    rows = []
    for m, s in data.schedules.items():
        prev = None
        for i, (c, t) in enumerate(zip(s.configs, s.traces + [[]] * len(s.configs)), start=1):
            end = next((r for r in reversed(t) if M.EVAL_REWARD in r), {})
            rows.append([m, str(i), str(c.get("steps", "-")), _changes(prev, c) if prev else _summary_one(c),
                         _fmt(end.get(M.EVAL_REWARD)), _fmt(end.get(M.TRAIN_EVAL_REWARD))])
            prev = c
    return Section("Best schedules, stage by stage", columns=["method", "stage", "steps", "config (vs the stage before)",
                                                              "held-out reward", "train-probe reward"],
                   rows=rows, anchor="schedules")


def _summary_one(c: dict) -> str:
    return ", ".join(f"{k}={_val(c[k])}" for k in KNOBS if c.get(k) is not None)


def _tree_section(data: TrainingData) -> Section:
    tree, default = data.tree, _default_config(data.tree)
    rows = [[str(n), str(s.get("parent", "-")), str(s.get("depth", "-")), _fmt(s.get("tune")), _fmt(s.get("train")),
             _node_change(n, tree, default), _top_finding(s) or "-"] for n, s in sorted(tree.items())]
    return Section(f"Tree nodes ({len(tree)})", columns=["node", "parent", "depth", "tune", "train probe", "change",
                                                         "top diagnosis"], rows=rows, anchor="tree")


def build_report(store, out: Path | None = None) -> Path:
    """Writes ``report.html`` for a training search and returns its path."""
    data = _load(store)
    meta, st = store.meta, data.settings
    rows = _headline_rows(data)
    figures = [_headline(data, rows)]
    if any(s.traces for s in data.schedules.values()):
        figures.append(_reward_curves(data))
    if data.tree:
        figures.append(_tree(data))
    if any(s.configs for s in data.schedules.values()):
        figures.append(_knobs(data))
    shown = data.schedules.get("tree") if data.tree else None
    shown = shown or max((s for s in data.schedules.values() if s.traces), key=lambda s: _rank(s.tune),
                         default=None)
    if shown is not None and shown.traces:
        figures.append(_metrics(shown))
    if history := _list(_dict(data.base.get("warm")).get("history")):
        figures.append(_warm(history))
    sections = [_run_section(data, meta, rows), _directions_section(data), _schedule_section(data)]
    if data.tree:
        sections.append(_tree_section(data))
    subtitle = (f"{st.get('task', '?')} · preset {st.get('preset', '?')} · budget {_budget(data)}, "
                f"depth {st.get('depth', '?')} · base tune reward {_fmt(data.base.get('tune'))}"
                + ("" if data.results else " · unfinished: no method has a result yet"))
    html = render_html(f"loopwise run {meta.run_id}", subtitle, figures, sections)
    path = out or (store.run_dir / "report.html")
    path.write_text(html, encoding="utf-8")
    return path
