"""HTML report of a ``kernels optimize`` run (``loopwise report RUN``): best speedup over
evaluations, the search tree, and per candidate its code diff against its parent, its verdict and
its reasons, and when it was profiled, its kernels' roofline classes, the tools' findings and the
roofline plot. A ``kernels eval`` run has its own report (``eval_html``)."""

from __future__ import annotations

import difflib
from pathlib import Path

from loopwise.core.report import Figure, Section, render_html
from loopwise.kernels.device import MARK, NOT_MEANINGFUL, marked, timing_meaningful

STATUS_COLORS = {"correct": "#1a7f37", "wrong_output": "#cf222e", "compile_error": "#fa4549", "crash": "#a40e26",
                 "timeout": "#9a6700", "oom": "#bf8700", "exploit": "#8250df", "pending": "#8c959f"}


def _load(store) -> dict:
    data = {"settings": {}, "nodes": {0: {"parent": None, "note": "PyTorch reference", "source": "", "by": ""}},
            "evals": {}, "profiles": {}, "reference": None, "requests": [], "decisions": [], "reviews": {}}
    order = 0
    for e in store.events():
        p = e.payload
        if e.kind == "settings":
            data["settings"] = p
        elif e.kind == "proposal":
            order += 1
            data["nodes"][order] = {"parent": p["parent"], "note": p.get("note", ""), "key": p["key"],
                                    "source": store.get_artifact(p["source_sha256"]).decode(), "by": p.get("by", "")}
        elif e.kind == "reference":
            data["reference"] = p
        elif e.kind == "request":
            data["requests"].append(p)
        elif e.kind in ("proposal_failed", "proposal_duplicate", "reprompt", "analysis", "analysis_failed",
                        "handover", "review_failed"):
            data["decisions"].append((e.kind, p))
        elif e.kind == "review":
            data["reviews"][p["node"]] = p
            data["decisions"].append((e.kind, p))
        elif e.kind == "profile":
            data["profiles"][p["node"]] = p
        elif e.kind == "evaluation" and "node" in p:
            data["evals"][p["node"]] = p["evaluation"]
    return data


def _curve(data) -> Figure:
    import plotly.graph_objects as go

    xs, best, ys, colors, text = [], [], [], [], []
    top = None
    for i, (node, ev) in enumerate(sorted(data["evals"].items()), start=1):
        s = ev.get("speedup") if ev["status"] == "correct" else None
        top = s if s is not None and (top is None or s > top) else top
        xs.append(i)
        best.append(top)
        ys.append(s if s is not None else 0.0)
        colors.append(STATUS_COLORS.get(ev["status"], "#57606a"))
        text.append(f"node {node}: {ev['status']}" + (f", {s:.3f}x" if s else ""))
    fig = go.Figure([go.Scatter(x=xs, y=best, mode="lines", name="best so far", line={"shape": "hv"}),
                     go.Scatter(x=xs, y=ys, mode="markers", name="each candidate (0 = failed)",
                                marker={"color": colors, "size": 9}, text=text, hoverinfo="text")])
    fig.update_layout(xaxis_title="evaluations", yaxis_title="speedup over eager", margin={"t": 20})
    return Figure("Best speedup over evaluations", fig)


def _depths(nodes: dict) -> dict[int, int]:
    depth = {0: 0}
    for n in sorted(nodes):
        if n:
            depth[n] = depth.get(nodes[n]["parent"], 0) + 1
    return depth


def _tree(data) -> Figure:
    import plotly.graph_objects as go

    nodes, evals, depth = data["nodes"], data["evals"], _depths(data["nodes"])
    ex, ey = [], []
    for n, info in nodes.items():
        if info["parent"] is not None:
            ex += [info["parent"], n, None]
            ey += [depth[info["parent"]], depth[n], None]
    status = {n: (evals[n]["status"] if n in evals else ("correct" if n == 0 else "pending")) for n in nodes}
    label = {n: f"node {n}: {nodes[n]['note']}<br>{status[n]}"
             + (f", {evals[n]['speedup']:.3f}x" if n in evals and evals[n].get("speedup") else "") for n in nodes}
    fig = go.Figure([go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#d0d7de"}, hoverinfo="skip",
                                showlegend=False),
                     go.Scatter(x=list(nodes), y=[depth[n] for n in nodes], mode="markers",
                                marker={"size": 12, "color": [STATUS_COLORS.get(status[n], "#57606a") for n in nodes]},
                                text=[label[n] for n in nodes], hoverinfo="text", showlegend=False)])
    fig.update_layout(xaxis_title="node (order of proposal)", yaxis_title="depth", yaxis_autorange="reversed",
                      margin={"t": 20})
    return Figure("Search tree (colour = status)", fig)


def fmt(v, unit="") -> str:
    """A number for a report cell: four significant digits and its unit, or ``-``."""
    return "-" if v is None else (f"{v:.4g}{unit}" if isinstance(v, float) else f"{v}{unit}")


def speedup_cell(ev: dict) -> str:
    """An evaluation's speedup as a cell, with MARK when it was timed on the CPU."""
    return marked(fmt(ev.get("speedup"), "x"), timing_meaningful(ev.get("device", "")))


def cpu_banner(evals) -> str:
    """The warning above a report whose speedups were timed on the CPU, or ""."""
    timed = [ev for ev in evals if ev.get("speedup")]
    return f"{MARK} {NOT_MEANINGFUL}" if any(not timing_meaningful(ev.get("device", "")) for ev in timed) else ""


def _profile_rows(profile: dict | None) -> list[list[str]]:
    """A profile's notes as rows of the candidate's table (kernel lines and the tools' findings)."""
    if not profile:
        return []
    if profile.get("error"):
        return [["profile", "failed", profile["error"]]]
    if profile.get("skipped"):
        return [["profile", "skipped", profile["skipped"]]]
    rows = []
    for note in profile.get("notes") or ():
        text = note["text"]
        moves = (note.get("evidence") or {}).get("moves")
        rows.append(["profile", profile.get("mode", ""), text + (f"  (try: {moves})" if moves else "")])
    return rows


def _roofline_png(store, node: int) -> list[tuple[str, bytes]]:
    from loopwise.kernels.optimize import profile_dir

    path = profile_dir(store.run_dir, node) / "roofline.png"
    try:
        return [(f"roofline of node {node}'s kernels", path.read_bytes())]
    except OSError:
        return []


def _candidate_sections(data, store) -> list[Section]:
    out = []
    for n, info in sorted(data["nodes"].items()):
        if n == 0:
            if n in data["profiles"]:
                out.append(Section("Node 0: the PyTorch reference", anchor="node0", columns=["source", "kind", "finding"],
                                   rows=_profile_rows(data["profiles"][0]), images=_roofline_png(store, 0)))
            continue
        ev = data["evals"].get(n, {})
        timing = ev.get("timing") or {}
        reasons = [[r["severity"], r["code"], r["message"]] for r in ev.get("reasons", [])]
        reasons += _profile_rows(data["profiles"].get(n))
        parent = data["nodes"].get(info["parent"], {}).get("source", "")
        diff = "".join(difflib.unified_diff(parent.splitlines(True), info["source"].splitlines(True),
                                            f"node {info['parent']}", f"node {n}")) or "(no parent source)"
        review = data["reviews"].get(n)
        facts = {"reviewer": f"{review['verdict']}: {review['explanation']}"} if review else {}
        out.append(Section(f"Node {n}: {info['note']}", anchor=f"node{n}", status=ev.get("status", "pending"),
                           facts={**facts, "parent": info["parent"], "speedup": speedup_cell(ev),
                                  "time (median)": fmt(timing.get("median_ms"), " ms"),
                                  "floor": fmt(ev.get("floor_ms"), " ms"),
                                  "energy": fmt(ev.get("energy_j_per_call"), " J/call")},
                           columns=["severity", "reason", "message"], rows=reasons,
                           images=_roofline_png(store, n) if n in data["profiles"] else [],
                           blocks=[("diff against its parent", diff), ("source", info["source"])]))
    return out


def _decisions_section(data) -> Section:
    """Who proposed what, in which role, under which prompt version, and every answer that was
    not used (failed, a duplicate) with the re-prompt it got."""
    from collections import Counter

    by = Counter(info["by"] or "unrecorded" for n, info in data["nodes"].items() if n)
    versions = sorted({r.get("prompt_version", "") for r in data["requests"]} - {""})
    cut = sum(1 for r in data["requests"] if r.get("cut"))
    rows = []
    for kind, p in data["decisions"]:
        if kind == "reprompt":
            rows.append(["re-prompt", f"node {p.get('parent')}", p.get("feedback", "")])
        elif kind in ROLE_ROWS:
            rows.append(ROLE_ROWS[kind](p))
        else:
            what = p.get("reason", "") if kind == "proposal_failed" else f"duplicate of node {p.get('node')}"
            rows.append([kind.removeprefix("proposal_"), f"node {p.get('parent')} ({p.get('by', '?')})",
                         f"{what}: {p.get('detail', '')}".rstrip(": ")])
    facts = {"candidates by proposer/role": ", ".join(f"{k} {v}" for k, v in sorted(by.items())) or "-",
             "requests": len(data["requests"]), "prompt versions": ", ".join(versions) or "-",
             "requests cut to the prompt budget": cut}
    return Section("Proposals and decisions", anchor="decisions", facts=facts,
                   columns=["decision", "for", "detail"], rows=rows)


ROLE_ROWS = {  # the analyst's plans, the reviewer's readings and a hybrid's hand-over, as decision rows
    "analysis": lambda p: ["analyst's plan", f"node {p['node']} ({p.get('by', '?')})",
                           f"{p['move']}: {p.get('rationale', '')}".rstrip(": ")],
    "review": lambda p: ["reviewer", f"node {p['node']} ({p.get('by', '?')})",
                         f"{p['verdict']}: {p['explanation']}"],
    "analysis_failed": lambda p: ["no plan", f"node {p['node']} ({p.get('by', '?')})",
                                  f"{p.get('reason', '')}: {p.get('detail', '')}"],
    "review_failed": lambda p: ["no review", f"node {p['node']} ({p.get('by', '?')})",
                                f"{p.get('reason', '')}: {p.get('detail', '')}"],
    "handover": lambda p: ["hand-over", f"node {p['node']}",
                           f"the model starts from node {p['node']} (the search asked for node {p['asked']})"],
}


def _reference_facts(ref: dict | None) -> dict:
    """The reference's measured times and the device's ceilings, as summary facts."""
    if not ref:
        return {}
    return {"eager": fmt(ref.get("eager_ms"), " ms"), "torch.compile": fmt(ref.get("compile_ms"), " ms"),
            "speed-of-light floor": fmt(ref.get("floor_ms"), " ms"),
            "ceilings": ", ".join(f"{k} {fmt(ref[k])}" for k in ("bandwidth_gbs", "fp32_tflops", "tf32_tflops",
                                                                 "bf16_tflops") if ref.get(k)) or "-"}


def build_report(store, out: Path | None = None) -> Path:
    """Writes ``report.html`` for a ``kernels optimize`` run and returns its path."""
    data = _load(store)
    meta, s = store.meta, data["settings"]
    rows = [[str(n), str(info["parent"]), info["by"] or "-", info["note"],
             data["evals"].get(n, {}).get("status", "pending"), speedup_cell(data["evals"].get(n, {}))]
            for n, info in sorted(data["nodes"].items()) if n]
    first = next(iter(data["evals"].values()), {})
    summary = Section("Candidates", facts={"run": meta.run_id, "kind": meta.kind,
                                           "device": first.get("device", "-"),
                                           "policy / tolerance": f"{first.get('policy', '-')} / "
                                                                 f"{first.get('tolerance', '-')}",
                                           **{k: v for k, v in s.items() if k in ("proposer", "search", "budget",
                                                                                 "objective", "seed")},
                                           **_reference_facts(data["reference"])},
                      columns=["node", "parent", "by", "move", "status", "speedup"], rows=rows)
    figures = [_curve(data)] + ([_tree(data)] if meta.kind == "kernels.optimize" else [])
    html = render_html(f"loopwise run {meta.run_id}", f"{first.get('problem', s.get('problem', ''))} · {meta.kind}",
                       figures, [summary, _decisions_section(data)] + _candidate_sections(data, store),
                       banner=cpu_banner(data["evals"].values()))
    path = out or (store.run_dir / "report.html")
    path.write_text(html, encoding="utf-8")
    return path
