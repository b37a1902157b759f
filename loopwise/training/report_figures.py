"""The figures of a training search's report: the headline table, reward curves, the stage tree,
the knobs' trajectories, the best schedule's metrics and the warm start."""

from __future__ import annotations

import textwrap

from loopwise.core.report import Figure
from loopwise.training import metrics as M
from loopwise.training.report_data import (
    KNOBS,
    METHOD_COLORS,
    PANELS,
    STAGE_COLORS,
    Schedule,
    TrainingData,
    as_dict,
    as_number,
    base_test_reward,
    changes_text,
    count_text,
    delta_text,
    fmt,
    parent_of,
    rank_of,
    schedule_summary,
    stages_text,
    top_finding,
    tree_path,
)


def headline_rows(data: TrainingData) -> list[list[str]]:
    """One row of the headline table per method."""
    grid, base_test = data.schedules.get("grid"), base_test_reward(data)
    rows = []
    for m, s in data.schedules.items():
        status = "done" if s.done else ("unfinished" if s.configs else "not started")
        c = s.compute
        rows.append([m, status, stages_text(s.stages_used, s.trained),
                     count_text(c.samples if c else None), count_text(c.tokens if c else None), fmt(s.tune), fmt(s.test),
                     delta_text(s.test, base_test), delta_text(s.test, grid.test) if grid and m != "grid" else "-",
                     schedule_summary(s)])
    return rows


HEADLINE_COLUMNS = ["method", "status", "stages", "samples", "tokens", "tune reward", "test reward", "test vs base",
                    "test vs grid", "best schedule"]


def headline_figure(data: TrainingData, rows: list[list[str]]) -> Figure:
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
    for ref, name, dash in ((as_number(data.base.get("tune")), "base tune", "dot"), (base_test_reward(data), "base test", "dash")):
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
            x = offset + (as_number(row.get(M.STEP)) or 0)
            rows.append((i, x, row))
            last = max(last, x)
        ends.append(last)
        offset = last
    return rows, ends


def reward_curves_figure(data: TrainingData) -> Figure:
    """Each method's reward across its stages."""
    import plotly.graph_objects as go

    fig, base = go.Figure(), as_number(data.base.get("tune"))
    for m, s in data.schedules.items():
        if not s.traces:
            continue
        rows, ends = _stitched(s.traces)
        color = METHOD_COLORS.get(m, "#1d2228")
        train = [(x, r[M.REWARD]) for _, x, r in rows if as_number(r.get(M.REWARD)) is not None]
        held = ([(0, base)] if base is not None else []) + [(x, r[M.EVAL_REWARD]) for _, x, r in rows
                                                            if as_number(r.get(M.EVAL_REWARD)) is not None]
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


def _layout(tree: dict[int, dict]) -> tuple[dict[int, int], dict[int, float]]:
    """Depth and y of every node: leaves in depth-first order, a parent at the mean of its children."""
    children: dict[int, list[int]] = {}
    for n in sorted(tree):
        children.setdefault(parent_of(tree, n), []).append(n)
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


def default_config(tree: dict[int, dict]) -> dict:
    """What the base's children are described against: tree_search's first proposal at the root is
    the session's default config."""
    first = min((n for n in tree if parent_of(tree, n) == 0), default=None)
    return {k: v for k, v in as_dict(tree[first].get("config")).items() if k != "steps"} if first is not None else {}


def node_change(n: int, tree: dict[int, dict], default: dict) -> str:
    """What node ``n``'s stage changed from its parent's config (or the default, for a first stage)."""
    p = parent_of(tree, n)
    ref = as_dict(tree[p].get("config")) if p else default
    return (("vs parent: " if p else "vs the default config: ") + changes_text(ref, as_dict(tree[n].get("config")))
            if ref else "-")


def _node_hover(n: int, s: dict, tree: dict[int, dict], default: dict) -> str:
    lines = [f"node {n} (parent {s.get('parent', 0)}, depth {s.get('depth', '?')})",
             f"tune {fmt(s.get('tune'))} · train probe {fmt(s.get('train'))}", node_change(n, tree, default)]
    if finding := top_finding(s):
        lines.append("diagnosis: " + finding)
    return "<br>".join("<br>".join(textwrap.wrap(line, 90)) for line in lines)


def tree_figure(data: TrainingData) -> Figure:
    """The stage tree, coloured by tuning reward."""
    import plotly.graph_objects as go

    tree, default = data.tree, default_config(data.tree)
    depth, ys = _layout(tree)
    best = max(tree, key=lambda n: (rank_of(tree[n].get("tune")), -n))
    on_best = {0} | {s["node"] for s in tree_path(tree, best)}
    ex, ey, bx, by = [], [], [], []
    for n in tree:
        p = parent_of(tree, n)
        xs, yv = (bx, by) if n in on_best and p in on_best else (ex, ey)
        xs += [depth[p], depth[n], None]
        yv += [ys[p], ys[n], None]
    tune = {n: as_number(tree[n].get("tune")) for n in tree} | {0: as_number(data.base.get("tune"))}
    hover = {n: _node_hover(n, tree[n], tree, default) for n in tree}
    hover[0] = f"node 0: the base (warm-started)<br>tune {fmt(data.base.get('tune'))}"
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


def knobs_figure(data: TrainingData) -> Figure:
    """The knobs' values across each method's chosen stages."""
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


def metrics_figure(s: Schedule) -> Figure:
    """The other training metrics of one schedule, one panel each."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=4, subplot_titles=PANELS, horizontal_spacing=0.06, vertical_spacing=0.16)
    rows, _ = _stitched(s.traces)
    for i, name in enumerate(PANELS):
        for stage in range(len(s.traces)):
            pts = [(x, r[name]) for j, x, r in rows if j == stage and as_number(r.get(name)) is not None]
            fig.add_scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                            name=f"stage {stage + 1}", legendgroup=str(stage), showlegend=i == 0,
                            marker={"size": 3}, line={"color": STAGE_COLORS[stage % len(STAGE_COLORS)]},
                            row=i // 4 + 1, col=i % 4 + 1)
        if not any(as_number(r.get(name)) is not None for _, _, r in rows):
            fig.add_annotation(text="not in the trace", showarrow=False, x=0.5, y=0.5, xref="x domain",
                               yref="y domain", font={"color": "#8c959f"}, row=i // 4 + 1, col=i % 4 + 1)
    fig.update_layout(margin={"t": 40}, legend={"orientation": "h", "y": -0.12})
    return Figure(f"Other metrics per step of the best {s.method} schedule, by stage", fig)


def warm_figure(history: list) -> Figure:
    """The warm start's pass rate over its steps."""
    import plotly.graph_objects as go

    pts = [p for p in history if isinstance(p, (list, tuple)) and len(p) == 2]
    fig = go.Figure(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers"))
    fig.update_layout(xaxis_title="supervised step", yaxis_title="sampled pass rate (tune)", margin={"t": 20})
    return Figure("Warm start of the base policy", fig)
