"""Terminal tables for the kernel commands (rich)."""

from __future__ import annotations

from loopwise.kernels.device import MARK, NOT_MEANINGFUL, marked

STATUS_STYLE = {"correct": "green", "wrong_output": "red", "compile_error": "red", "timeout": "yellow",
                "crash": "red", "oom": "yellow", "exploit": "bold magenta"}


def progress(console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 0.1 else f"{value:.3f}"


def _time(ev, timing):
    if timing is None:
        return None
    return timing.pick(ev.statistic)


def _queued(ev) -> bool:
    t = ev.timing
    return t is not None and t.method == "cuda_event" and t.gpu_median_ms is not None


def _clock_note(evaluations) -> str:
    clocks = {e.timing.clock for e in evaluations if e.timing is not None}
    return f" · clock {', '.join(sorted(clocks))}" if clocks else ""


def print_evaluations(console, evaluations, run_id: str) -> None:
    from rich.table import Table

    if not evaluations:
        return
    first = evaluations[0]
    table = Table(title=f"{first.problem} on {first.device} · policy {first.policy} · tolerance {first.tolerance} "
                        f"· {first.statistic} of timed calls" + _clock_note(evaluations))
    columns = [("candidate", lambda e: e.candidate),
               ("status", lambda e: f"[{STATUS_STYLE.get(e.status.value, '')}]{e.status.value}[/]"),
               ("speedup", lambda e: marked(f"{e.speedup:.2f}x", e.timing_meaningful) if e.speedup is not None
                else "-"),
               ("ms", lambda e: _ms(_time(e, e.timing))),
               ("eager ms", lambda e: _ms(_time(e, e.reference_timing)))]
    if any(_queued(e) for e in evaluations):  # the judge's queued pass: GPU time and host launch apart
        columns += [("gpu ms", lambda e: _ms(_queued(e) and e.timing.gpu_median_ms)),
                    ("launch ms", lambda e: _ms(_queued(e) and e.timing.launch_median_ms))]
    if any(e.floor_ms for e in evaluations):
        columns.append(("floor ms", lambda e: _ms(e.floor_ms)))
    if any(e.energy_j_per_call for e in evaluations):
        columns.append(("J/call", lambda e: f"{e.energy_j_per_call:.3g}" if e.energy_j_per_call else "-"))
    columns.append(("reasons", lambda e: ", ".join(dict.fromkeys(
        x.code for x in e.reasons if x.severity in ("reject", "flag"))) or "-"))
    for name, _ in columns:
        table.add_column(name, overflow="fold", no_wrap=name in ("candidate", "status", "speedup"))
    for ev in evaluations:
        table.add_row(*(cell(ev) for _, cell in columns))
    console.print(table)
    for ev in evaluations:
        shown = [x for x in ev.reasons if x.severity == "reject"][:1] or [x for x in ev.reasons if x.severity == "flag"][:1]
        for x in shown:
            console.print(f"  [bold]{ev.candidate}[/] {x.severity}: {x.code}: {x.message}", highlight=False)
    footnote(console, any(e.speedup is not None and not e.timing_meaningful for e in evaluations))
    console.print(f"recorded in run {run_id} (loopwise runs show {run_id})")


def footnote(console, shown: bool) -> None:
    """The line that explains MARK, under a table where some speedup carries it."""
    if shown:
        console.print(f"[dim]{MARK} {NOT_MEANINGFUL}[/]", highlight=False)


def print_check(results, policy: str) -> None:
    from loopwise.core.console import console as make_console
    from rich.table import Table

    table = Table(title=f"static scan · policy {policy}")
    for col in ("candidate", "verdict", "findings"):
        table.add_column(col, overflow="fold")
    for name, reasons in results:
        rejected = any(r.severity == "reject" for r in reasons)
        verdict = "[bold magenta]rejected[/]" if rejected else "[green]no exploit found[/]"
        lines = "\n".join(f"{r.severity}: {r.code}: {r.message}" for r in reasons) or "-"
        table.add_row(name, verdict, lines)
    make_console().print(table)


def print_baselines(console, rows, statistic: str) -> None:
    from rich.table import Table

    table = Table(title=f"baselines · {statistic} ms per call · device {rows[0].device if rows else ''}")
    tf32 = any(row.eager_tf32 is not None for row in rows)
    for col in ("problem", "eager", "compile", "max-autotune") + (("eager+TF32",) if tf32 else ()) + (
            "floor", "bound", "notes"):
        table.add_column(col, overflow="fold")
    for row in rows:
        def cell(v):
            if v is None:
                return "-"
            if v.timing is None:
                return f"[red]{v.status}[/]"
            t = v.timing.pick(statistic)
            s = row.speedup(v, statistic)
            ratio = marked(f"{s:.2f}x", row.timing_meaningful) if s is not None and v is not row.eager else ""
            wrong = " [red]wrong output[/]" if v.correct is False else ""
            return _ms(t) + (f" ({ratio})" if ratio else "") + wrong

        variants = (row.eager, row.compile, row.max_autotune) + ((row.eager_tf32,) if tf32 else ())
        notes = "; ".join([v.message for v in variants if v and v.message]
                          + [f"{v.kind}: {v.correct_message}" for v in variants if v and v.correct is False])
        table.add_row(row.problem, *(cell(v) for v in variants), _ms(row.floor_ms),
                      row.floor_bound or "-", notes or row.floor_note or "-")
    console.print(table)
    footnote(console, any(not row.timing_meaningful for row in rows))
