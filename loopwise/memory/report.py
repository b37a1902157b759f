"""HTML report of a memory plan (``loopwise memory plan MODEL --html FILE``): DRAM traffic per
operator, layer by layer against the plan's groups; the scratchpad's occupancy along the model
(the residency timeline) against its capacity; and a table of the groups."""

from __future__ import annotations

from loopwise.core.report import Figure, Section, render_html


def _traffic_figure(plan, names: list[str]) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_bar(x=list(range(len(names))), y=[b / 1e6 for b in plan.layer_by_layer], name="layer by layer",
                hovertext=names, marker_color="#8c959f")
    start, xs, ys, widths, labels = 0, [], [], [], []
    for grp in plan.groups:
        n = len(grp.operators)
        xs.append(start + (n - 1) / 2)
        ys.append(grp.traffic_bytes / 1e6)
        widths.append(max(n - 0.2, 0.8))
        labels.append(f"{grp.operators[0]} .. {grp.operators[-1]} ({n} operators)")
        start += n
    fig.add_bar(x=xs, y=ys, width=widths, name="plan (one bar per group)", hovertext=labels, marker_color="#0969da",
                opacity=0.75)
    fig.update_layout(barmode="overlay", xaxis_title="operator (execution order)", yaxis_title="DRAM traffic (MB)",
                      yaxis_type="log", height=420, margin=dict(l=60, r=20, t=30, b=50))
    return Figure("DRAM traffic per operator: each layer alone vs the plan's groups", fig)


def _timeline_figure(plan, names: list[str], capacity: int) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    start = 0
    for i, grp in enumerate(plan.groups):
        n = len(grp.operators)
        held = list(grp.occupancy) or [grp.peak_bytes] * n
        runs = "tiled" if grp.tiled else "whole" if grp.slab is None else f"{grp.slab.count} slabs"
        fig.add_scatter(x=list(range(start, start + n)), y=[b / 2**20 for b in held], mode="lines", fill="tozeroy",
                        line_shape="hv", name=f"group {i} ({runs})", hovertext=names[start:start + n],
                        showlegend=len(plan.groups) <= 30)
        start += n
    fig.add_hline(y=capacity / 2**20, line_dash="dash", line_color="#cf222e", annotation_text="scratchpad")
    fig.update_layout(xaxis_title="operator (execution order)", yaxis_title="held on chip (MiB)", height=380,
                      margin=dict(l=60, r=20, t=30, b=50))
    return Figure("Residency timeline: what the scratchpad holds at each operator", fig)


def render_plan_report(graph, plan, target, imported=None) -> str:
    names = [op.name for op in graph.operators]
    mb = lambda b: f"{b / 1e6:,.2f}"  # noqa: E731
    facts = {"operators": len(names), "target": f"{target.name} ({target.scratchpad.bytes / 2**20:g} MiB scratchpad)",
             "compulsory (MB)": mb(plan.compulsory_bytes), "layer by layer (MB)": mb(plan.layer_by_layer_bytes),
             "plan (MB)": mb(plan.total_bytes), "plan / compulsory": f"{plan.total_bytes / plan.compulsory_bytes:.3f}",
             "plan / layer by layer": f"{plan.total_bytes / plan.layer_by_layer_bytes:.3f}",
             "store/load pairs removed": plan.pairs_removed}
    if imported is not None:
        facts["copy operators folded"] = len(imported.folded)
        if imported.unsupported:
            from loopwise.memory.imported import UNSUPPORTED

            facts[UNSUPPORTED] = ", ".join(
                f"{k} x{v}" for k, v in sorted(imported.unsupported.items()))
    rows = []
    for i, grp in enumerate(plan.groups):
        runs = "tiled alone" if grp.tiled else "whole" if grp.slab is None else (
            f"{grp.slab.describe()}; {len(grp.slab.resident)} invariants resident, {len(grp.slab.streamed)} streamed")
        first, last = grp.operators[0], grp.operators[-1]
        rows.append([str(i), first if first == last else f"{first} .. {last}", str(len(grp.operators)), runs,
                     mb(grp.traffic_bytes), f"{grp.peak_bytes / 2**20:,.2f}", str(len(grp.resident))])
    section = Section("Groups", facts=facts, columns=["group", "operators", "count", "runs", "traffic MB", "peak MiB",
                                                      "kept on chip"], rows=rows)
    return render_html(f"Memory plan: {graph.name}", f"{target.name}, whole-model plan against the layer-by-layer baseline",
                       [_traffic_figure(plan, names), _timeline_figure(plan, names, target.scratchpad.bytes)], [section])
