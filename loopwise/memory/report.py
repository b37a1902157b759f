"""HTML report of a memory plan run (``loopwise report RUN``, ``loopwise memory plan --html FILE``):
the traffic of the plan against the compulsory bound, the per-operator bounds and the
layer-by-layer baseline; the scratchpad's occupancy at each operator as the verifier replayed it,
against its capacity; the plan per group; its time and energy on the target; its schedule (loop
nests, buffer offsets, DMA transfers); and every candidate's verdict. A plan the verifier
rejected shows its violations, never its numbers."""

from __future__ import annotations

import json
from pathlib import Path

from loopwise.core.report import Figure, Section, render_html


def _mb(b: float) -> str:
    return f"{b / 1e6:,.2f}"


def _events(store) -> dict:
    latest = lambda kind: {k: e.payload for k, e in store.latest_by_key(kind).items()}  # noqa: E731
    candidates = latest("candidate")
    return {"inputs": latest("inputs").get("inputs", {}), "bounds": latest("bounds").get("bounds"),
            "candidates": candidates, "verdicts": latest("verdict"), "result": latest("result").get("result"),
            "plans": {k: json.loads(store.get_artifact(c["plan"])) for k, c in candidates.items()}}


def _totals_figure(plan: dict, bounds: dict) -> Figure:
    import plotly.graph_objects as go

    names = ["compulsory", "sum of per-operator bounds", "plan", "layer by layer"]
    values = [plan["compulsory_bytes"], bounds["operator_bounds_bytes"], plan["total_bytes"], plan["layer_by_layer_bytes"]]
    fig = go.Figure(go.Bar(x=names, y=[v / 1e6 for v in values], marker_color=["#8c959f", "#bf8700", "#0969da", "#cf222e"],
                           text=[_mb(v) for v in values]))
    fig.update_layout(yaxis_title="DRAM traffic (MB)", height=360, margin=dict(l=60, r=20, t=30, b=50))
    return Figure("DRAM traffic: the plan against the compulsory bound and the layer-by-layer baseline", fig)


def _traffic_figure(plan: dict) -> Figure:
    import plotly.graph_objects as go

    ops = plan["operators"]
    names = [o["operator"] for o in ops]
    fig = go.Figure()
    fig.add_bar(x=list(range(len(ops))), y=[o["layer_by_layer_bytes"] / 1e6 for o in ops], name="layer by layer",
                hovertext=names, marker_color="#8c959f")
    start, xs, ys, widths, labels = 0, [], [], [], []
    for grp in plan["groups"]:
        n = len(grp["operators"])
        xs.append(start + (n - 1) / 2)
        ys.append(grp["traffic_bytes"] / 1e6)
        widths.append(max(n - 0.2, 0.8))
        labels.append(f"{grp['operators'][0]} .. {grp['operators'][-1]} ({n} operators)")
        start += n
    fig.add_bar(x=xs, y=ys, width=widths, name="plan (one bar per group)", hovertext=labels, marker_color="#0969da",
                opacity=0.75)
    fig.add_scatter(x=list(range(len(ops))), y=[o["bound_bytes"] / 1e6 for o in ops], mode="markers",
                    name="operator's own bound", hovertext=names, marker_color="#bf8700")
    fig.update_layout(barmode="overlay", xaxis_title="operator (execution order)", yaxis_title="DRAM traffic (MB)",
                      yaxis_type="log", height=420, margin=dict(l=60, r=20, t=30, b=50))
    return Figure("DRAM traffic per operator: each layer alone vs the plan's groups", fig)


def _timeline_figure(plan: dict, verdict: dict, capacity: int) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    start, many = 0, len(plan["groups"]) > 30
    for i, (grp, replay) in enumerate(zip(plan["groups"], verdict.get("groups", []))):
        held = dict(replay.get("held_bytes") or [])
        names = grp["operators"]
        fig.add_scatter(x=list(range(start, start + len(names))), y=[held.get(n, 0) / 2**20 for n in names],
                        mode="lines", fill="tozeroy", line_shape="hv", hovertext=names, showlegend=not many,
                        name=f"group {i} ({_runs(grp)})")
        start += len(names)
    fig.add_hline(y=capacity / 2**20, line_dash="dash", line_color="#cf222e", annotation_text="scratchpad")
    fig.update_layout(xaxis_title="operator (execution order)", yaxis_title="held on chip (MiB)", height=380,
                      margin=dict(l=60, r=20, t=30, b=50))
    return Figure("Residency timeline: what the scratchpad holds at each operator, as the verifier replayed it", fig)


def _runs(grp: dict) -> str:
    from loopwise.memory.plan_json import describe_runs

    return describe_runs(grp)


def _groups_section(plan: dict, verdict: dict) -> Section:
    rows = []
    for i, (grp, replay) in enumerate(zip(plan["groups"], verdict.get("groups", []))):
        slab = grp["slab"]
        runs = "tiled alone" if grp["tiled"] else _runs(grp) + (
            f"; {len(slab['resident'])} invariants resident, {len(slab['streamed'])} streamed" if slab else "")
        first, last = grp["operators"][0], grp["operators"][-1]
        rows.append([str(i), first if first == last else f"{first} .. {last}", str(len(grp["operators"])), runs,
                     _mb(grp["traffic_bytes"]), f"{grp['peak_bytes'] / 2**20:,.2f}",
                     f"{replay['peak_bytes'] / 2**20:,.2f}", str(len(grp["resident"]))])
    return Section("Groups", columns=["group", "operators", "count", "runs", "traffic MB", "peak MiB",
                                      "replayed peak MiB", "kept on chip"], rows=rows)


def _candidates_section(ev: dict) -> Section:
    rows, blocks = [], []
    for name, cand in ev["candidates"].items():
        verdict = ev["verdicts"].get(name)
        status = verdict["status"] if verdict else "not judged yet"
        shown = _mb(cand["total_bytes"]) if verdict and verdict["status"] == "accepted" else "-"
        rows.append([name, status, shown, str(cand["groups"]), str(len(verdict["violations"])) if verdict else "-"])
        if verdict:
            lines = list(verdict.get("summary", []))
            lines += [f"  {v['kind']}: {v['where']}: {v['message']}" for v in verdict["violations"][3:20]]
            blocks.append((f"{name}: the verifier's replay", "\n".join(lines)))
    return Section("Candidates and the verifier's verdicts", columns=["candidate", "verdict", "traffic MB", "groups",
                                                                        "violations"], rows=rows, blocks=blocks)


def render_run_report(run_id: str, ev: dict, resume: str = "") -> str:
    """The page for a plan run's recorded events (``ev``: inputs, bounds, candidates, verdicts,
    result and each candidate's plan JSON); ``resume`` is the command that continues it."""
    inputs, bounds, result = ev["inputs"], ev["bounds"], ev["result"]
    plan, verdict = ev["plans"].get("planner"), ev["verdicts"].get("planner")
    facts = {"run": run_id, "model": inputs.get("model", "?"), "target": inputs.get("target", "?"),
             "batch": inputs.get("batch", "?"), "verdict": "unfinished" if result is None else result["status"]}
    figures, sections, banner = [], [], ""
    if bounds:
        facts.update({"operators": len(bounds["per_operator"]),
                      "scratchpad": f"{bounds['capacity_bytes'] / 2**20:g} MiB",
                      "compulsory (MB)": _mb(bounds["compulsory_bytes"]),
                      "sum of per-operator bounds (MB)": _mb(bounds["operator_bounds_bytes"])})
    if result is None:
        banner = f"This run is unfinished: continue it with {resume}." if resume else "This run is unfinished."
    elif result["status"] != "accepted":
        banner = "The planner's plan failed the verifier's replay: it is recorded as rejected, its numbers are no result."
    elif plan is not None and verdict is not None:
        facts.update({"layer by layer (MB)": _mb(plan["layer_by_layer_bytes"]), "plan (MB)": _mb(plan["total_bytes"]),
                      "plan / compulsory": f"{plan['ratio_to_compulsory']:.3f}",
                      "plan / layer by layer": f"{plan['ratio_to_layer_by_layer']:.3f}",
                      "store/load pairs removed": plan["pairs_removed"], "copy operators folded": plan["copies_folded"]})
        if plan.get("operators_folded"):
            facts["applied by the products that read them"] = ", ".join(plan["operators_folded"])
        if plan["unsupported"]:
            from loopwise.memory.imported import UNSUPPORTED

            facts[UNSUPPORTED] = ", ".join(f"{k} x{v}" for k, v in sorted(plan["unsupported"].items()))
        figures = [_totals_figure(plan, bounds), _traffic_figure(plan),
                   _timeline_figure(plan, verdict, bounds["capacity_bytes"])]
        sections.append(_groups_section(plan, verdict))
        from loopwise.memory.report_schedule import buffers_section, loop_nest_section, time_section

        sections += [time_section(plan), loop_nest_section(plan), buffers_section(plan)]
    sections.insert(0, Section("Run", facts=facts))
    sections.append(_candidates_section(ev))
    title = f"Memory plan: {plan['model'] if plan else inputs.get('model', '?')}"
    return render_html(title, f"loopwise run {run_id} · whole-model plan against the layer-by-layer baseline",
                       figures, sections, banner=banner)


def build_report(store, out: Path | None = None) -> Path:
    """Writes the HTML report of a memory plan run and returns its path (default ``RUN/report.html``)."""
    path = out or (store.run_dir / "report.html")
    from loopwise.memory.run import resume_line

    path.write_text(render_run_report(store.meta.run_id, _events(store), resume_line(store)), encoding="utf-8")
    return path
