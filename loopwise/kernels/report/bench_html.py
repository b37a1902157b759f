"""HTML report of a bench (``loopwise report BENCH_RUN``): the table per level, each problem's best
speedup against eager and torch.compile, and a link from each row to its optimize run's id."""

from __future__ import annotations

from pathlib import Path

from loopwise.core.report import Figure, Section, render_html
from loopwise.kernels.bench.run import FAST_P, aggregate
from loopwise.kernels.device import MARK, NOT_MEANINGFUL


def _rows(store) -> tuple[dict, list[dict]]:
    settings, rows = {}, {}
    for e in store.events():
        if e.kind == "bench_settings":
            settings = e.payload
        elif e.kind == "problem_result":
            rows[e.key] = e.payload
    return settings, sorted(rows.values(), key=lambda r: (r["level"], r["id"]))


def _x(v) -> str:
    return f"{v:.2f}x" if v else "-"


def _geomean_cell(t: dict, over: str, measured: str) -> str:
    """A group's geomean over ``over`` (compile, yardstick), the problems it covers and its 95% interval."""
    ci = t.get(f"geomean_over_{over}_ci95")
    interval = f"; 95% {ci[0]:.2f}-{ci[1]:.2f}" if ci else ""
    return f"{_x(t.get(f'geomean_over_{over}'))} (n={t.get(measured, 0)}{interval})"


def table_rows(table: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The aggregate table as columns and text rows (the console and the page print the same)."""
    cols = ["group", "problems", "correct", "geomean vs eager", "geomean vs compile"]
    clocks = any(t.get("geomean_over_compile_gpu") for t in table)
    if clocks:  # the same ratio from the GPU time alone and from the larger of GPU and launch time
        cols.append("vs compile: gpu / steady clock")
    yardstick = any(t.get("geomean_over_yardstick") for t in table)
    if yardstick:  # the relaxed track's: the faster of eager with TF32 and torch.compile
        cols.append("geomean vs best(eager+TF32, compile)")
    cols += [f"fast_{p:g} eager / compile" for p in FAST_P]
    cols += ["below 0.97x compile", "compile wrong", "s per problem"]
    rows = []
    for t in table:
        line = [t["group"], str(t["problems"]), str(t["correct"]), _x(t["geomean_over_eager"]),
                _geomean_cell(t, "compile", "compile_measured")]
        if clocks:
            line.append(f"{_x(t.get('geomean_over_compile_gpu'))} / {_x(t.get('geomean_over_compile_steady'))}")
        if yardstick:
            line.append(_geomean_cell(t, "yardstick", "yardstick_measured"))
        line += [f"{t[f'fast_{p:g}_eager']:.0%} / " + (f"{t[f'fast_{p:g}_compile']:.0%}" if t["compile_measured"] else "-")
                 for p in FAST_P]  # no torch.compile time (--no-compile): no second denominator
        seconds = t.get("seconds_per_problem")
        line += [str(t.get("below_compile", "-")) if t["compile_measured"] else "-",
                 str(t.get("compile_wrong", "-")) if t["compile_measured"] else "-",
                 f"{seconds:.0f}" if seconds is not None else "-"]
        rows.append(line)
    return cols, rows


def build_report(store, out: Path | None = None) -> Path:
    import plotly.graph_objects as go

    settings, rows = _rows(store)
    table = aggregate(rows) if rows else []
    figures = []
    if rows:
        names = [f"L{r['level']}/{r['id']}" for r in rows]
        fig = go.Figure([go.Bar(x=names, y=[r.get("best_speedup") or 0 for r in rows], name="vs eager"),
                         go.Bar(x=names, y=[r.get("over_compile") or 0 for r in rows], name="vs torch.compile")])
        fig.add_hline(y=1.0, line_dash="dot")
        fig.update_layout(barmode="group", yaxis_type="log", yaxis_title="best speedup (0: none correct)",
                          margin={"t": 20})
        figures.append(Figure("Best correct candidate per problem", fig))
    cols, trows = table_rows(table)
    sections = [Section("The table", facts={k: str(v) for k, v in settings.items()}, columns=cols, rows=trows)]
    prob_cols = ["problem", "evaluations", "best vs eager", "vs compile", "eager ms", "compile ms", "failures",
                 "optimize run"]
    prob_rows = [[r.get("problem", ""), str(r.get("evaluations", 0)), _x(r.get("best_speedup")),
                  _x(r.get("over_compile")), f"{r['eager_ms']:.4g}" if r.get("eager_ms") else "-",
                  f"{r['compile_ms']:.4g}" if r.get("compile_ms") else "-",
                  ", ".join(f"{k} {v}" for k, v in sorted((r.get("failures") or {}).items())) or r.get("error", ""),
                  r.get("run_id") or ""] for r in rows]
    sections.append(Section("Problems", columns=prob_cols, rows=prob_rows))
    meaningful = all(r.get("timing_meaningful", True) for r in rows)
    html = render_html(f"loopwise bench {store.meta.run_id}", f"{len(rows)} problems", figures, sections,
                       banner="" if meaningful else f"{MARK} {NOT_MEANINGFUL}")
    path = out or (store.run_dir / "report.html")
    path.write_text(html, encoding="utf-8")
    return path
