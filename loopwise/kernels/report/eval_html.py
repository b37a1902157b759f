"""HTML report of a ``kernels eval`` run (``loopwise report RUN``): the candidates it judged side
by side (status, reasons, speedup, times, floor, precision policy and tolerance), then each
candidate's verdict, reasons and source. The candidates are unrelated files, so there is no tree,
no parent and no diff (``optimize_html`` draws those for an optimize run)."""

from __future__ import annotations

from pathlib import Path

from loopwise.core.report import Figure, Section, render_html
from loopwise.kernels.report.optimize_html import STATUS_COLORS, cpu_banner, fmt, speedup_cell

KIND = "kernels.eval"


def _verdicts(store) -> list[tuple[dict, str]]:
    """Each candidate's latest verdict with its source, in the order first judged (a resumed run
    judges again only what it had not judged)."""
    out: dict[str, tuple[dict, str]] = {}
    for event in store.events(kind="evaluation"):
        p = event.payload
        sha = p.get("source_sha256")
        out[event.key or str(event.seq)] = (p["evaluation"], store.get_artifact(sha).decode() if sha else "")
    return list(out.values())


def _reasons(ev: dict) -> str:
    rejections = [r for r in ev.get("reasons") or () if r.get("severity", "reject") == "reject"]
    return ", ".join(r.get("code", "?") for r in rejections) or "-"


def _row(ev: dict) -> list[str]:
    timing, ref = ev.get("timing") or {}, ev.get("reference_timing") or {}
    return [ev.get("candidate", "?"), ev.get("status", "?"), _reasons(ev), _speedup(ev),
            fmt(timing.get("median_ms"), " ms"), fmt(ref.get("median_ms"), " ms"), fmt(ev.get("floor_ms"), " ms"),
            f"{ev.get('policy', '-')} / {ev.get('tolerance', '-')}"]


def _speedup(ev: dict) -> str:
    """The speedup cell of a correct candidate (marked when timed on the CPU), else ``-``."""
    return speedup_cell(ev) if ev.get("status") == "correct" else "-"


def _speedups(verdicts: list[tuple[dict, str]]) -> Figure:
    import plotly.graph_objects as go

    names = [ev.get("candidate", "?") for ev, _ in verdicts]
    ys = [(ev.get("speedup") or 0.0) if ev.get("status") == "correct" else 0.0 for ev, _ in verdicts]
    colors = [STATUS_COLORS.get(ev.get("status"), "#57606a") for ev, _ in verdicts]
    text = [f"{ev.get('candidate', '?')}: {ev.get('status', '?')}" for ev, _ in verdicts]
    fig = go.Figure([go.Bar(x=names, y=ys, marker={"color": colors}, text=text, hoverinfo="text")])
    fig.update_layout(xaxis_title="candidate", yaxis_title="speedup over eager (0 = not correct)", margin={"t": 20})
    return Figure("Speedup of each candidate", fig)


def _section(i: int, ev: dict, source: str) -> Section:
    timing, ref = ev.get("timing") or {}, ev.get("reference_timing") or {}
    return Section(f"{ev.get('candidate', '?')}", anchor=f"candidate{i}", status=ev.get("status", "?"),
                   facts={"speedup": _speedup(ev),
                          "time (median)": fmt(timing.get("median_ms"), " ms"),
                          "eager (median)": fmt(ref.get("median_ms"), " ms"),
                          "floor": fmt(ev.get("floor_ms"), " ms"),
                          "energy": fmt(ev.get("energy_j_per_call"), " J/call"),
                          "policy / tolerance": f"{ev.get('policy', '-')} / {ev.get('tolerance', '-')}",
                          "backend": ev.get("backend") or "-"},
                   columns=["severity", "reason", "message"],
                   rows=[[r.get("severity", ""), r.get("code", ""), r.get("message", "")]
                         for r in ev.get("reasons") or ()],
                   blocks=[("source", source)])


def build_eval_report(store, out: Path | None = None) -> Path:
    """Writes ``report.html`` for a ``kernels eval`` run and returns its path."""
    verdicts = _verdicts(store)
    meta = store.meta
    first = verdicts[0][0] if verdicts else {}
    summary = Section("Candidates judged", facts={"run": meta.run_id, "kind": meta.kind,
                                                  "device": first.get("device", "-")},
                      columns=["candidate", "status", "reasons", "speedup", "time (median)", "eager (median)",
                               "floor", "policy / tolerance"], rows=[_row(ev) for ev, _ in verdicts])
    sections = [summary] + [_section(i, ev, source) for i, (ev, source) in enumerate(verdicts, start=1)]
    html = render_html(f"loopwise run {meta.run_id}", f"{first.get('problem', '')} · {meta.kind}",
                       [_speedups(verdicts)] if verdicts else [], sections,
                       banner=cpu_banner(ev for ev, _ in verdicts))
    path = out or (store.run_dir / "report.html")
    path.write_text(html, encoding="utf-8")
    return path
