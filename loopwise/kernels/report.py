"""Terminal tables for the kernel commands (rich)."""

from __future__ import annotations

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


def print_evaluations(console, evaluations, run_id: str) -> None:
    from rich.table import Table

    if not evaluations:
        return
    first = evaluations[0]
    table = Table(title=f"{first.problem} on {first.device} · policy {first.policy} · tolerance {first.tolerance} "
                        f"· {first.statistic} of timed calls")
    for col in ("candidate", "status", "speedup", "ms", "eager ms", "floor ms", "J/call", "reasons"):
        table.add_column(col, overflow="fold")
    for ev in evaluations:
        style = STATUS_STYLE.get(ev.status.value, "")
        t = ev.timing.median_ms if ev.timing and ev.statistic == "median" else (ev.timing.mean_ms if ev.timing else None)
        r = ev.reference_timing
        rt = (r.median_ms if ev.statistic == "median" else r.mean_ms) if r else None
        reasons = [x for x in ev.reasons if x.severity in ("reject", "flag")]
        text = ", ".join(dict.fromkeys(x.code for x in reasons)) or "-"
        table.add_row(ev.candidate, f"[{style}]{ev.status.value}[/]",
                      f"{ev.speedup:.2f}x" if ev.speedup is not None else "-", _ms(t), _ms(rt), _ms(ev.floor_ms),
                      f"{ev.energy_j_per_call:.3g}" if ev.energy_j_per_call else "-", text)
    console.print(table)
    for ev in evaluations:
        shown = [x for x in ev.reasons if x.severity == "reject"][:1] or [x for x in ev.reasons if x.severity == "flag"][:1]
        for x in shown:
            console.print(f"  [bold]{ev.candidate}[/] {x.severity}: {x.code}: {x.message}", highlight=False)
    console.print(f"recorded in run {run_id} (loopwise runs show {run_id})")


def print_check(results, policy: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"static scan · policy {policy}")
    for col in ("candidate", "verdict", "findings"):
        table.add_column(col, overflow="fold")
    for name, reasons in results:
        rejected = any(r.severity == "reject" for r in reasons)
        verdict = "[bold magenta]rejected[/]" if rejected else "[green]no exploit found[/]"
        lines = "\n".join(f"{r.severity}: {r.code}: {r.message}" for r in reasons) or "-"
        table.add_row(name, verdict, lines)
    Console().print(table)


def print_baselines(console, rows, statistic: str) -> None:
    from rich.table import Table

    table = Table(title=f"baselines · {statistic} ms per call · device {rows[0].device if rows else ''}")
    for col in ("problem", "eager", "compile", "max-autotune", "floor", "bound", "notes"):
        table.add_column(col, overflow="fold")
    for row in rows:
        def cell(v):
            if v is None:
                return "-"
            if v.timing is None:
                return f"[red]{v.status}[/]"
            t = v.timing.median_ms if statistic == "median" else v.timing.mean_ms
            s = row.speedup(v, statistic)
            return _ms(t) + (f" ({s:.2f}x)" if s is not None and v is not row.eager else "")

        notes = "; ".join(v.message for v in (row.eager, row.compile, row.max_autotune) if v and v.message)
        table.add_row(row.problem, cell(row.eager), cell(row.compile), cell(row.max_autotune), _ms(row.floor_ms),
                      row.floor_bound or "-", notes or row.floor_note or "-")
    console.print(table)
