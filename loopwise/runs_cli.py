"""``loopwise runs ...``: what the run store holds."""

from __future__ import annotations

import json
from typing import Optional

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.command("list")
def list_cmd(runs_dir: str = typer.Option("runs", help="Folder of runs."),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Runs in the store, oldest first."""
    from loopwise.core.store import list_runs

    runs = list_runs(runs_dir)
    if as_json:
        typer.echo(json.dumps([{"run_id": r.run_id, "kind": r.kind, "created": r.created} for r in runs], indent=2))
        return
    from datetime import datetime, timezone

    for r in runs:
        when = datetime.fromtimestamp(r.created, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        typer.echo(f"{r.run_id}  {r.kind:<16} {when}")


def report(run_id: str = typer.Argument(..., help="Run ID (see loopwise runs list)."),
           runs_dir: str = typer.Option("runs", help="Folder of runs."),
           out: Optional[str] = typer.Option(None, help="Where to write the HTML (default: RUN/report.html)."),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """One self-contained HTML report of a run (opens offline)."""
    from pathlib import Path

    from loopwise.core.engines import engine_for_run
    from loopwise.core.run import open_run

    with open_run(runs_dir, run_id) as store:
        build_report = engine_for_run(store.meta.kind).report_builder(store.meta.kind)
        path = build_report(store, Path(out) if out else None)
    typer.echo(json.dumps({"run_id": run_id, "report": str(path)}) if as_json else f"report written to {path}")


@app.command("show")
def show_cmd(run_id: str, runs_dir: str = typer.Option("runs", help="Folder of runs."),
             kind: Optional[str] = typer.Option(None, help="Only events of this kind."),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """The events of one run."""
    from loopwise.core.run import open_run

    with open_run(runs_dir, run_id) as store:
        events = list(store.events(kind=kind))
        if as_json:
            typer.echo(json.dumps([{"seq": e.seq, "ts": e.ts, "kind": e.kind, "key": e.key, "payload": e.payload}
                                   for e in events], indent=2))
            return
        typer.echo(f"run {run_id} ({store.meta.kind}), {len(events)} events")
        for e in events:
            summary = e.payload.get("evaluation", {}).get("status") if e.kind == "evaluation" else ""
            typer.echo(f"{e.seq:>5} {e.kind:<12} {(e.key or '')[:12]:<12} {summary}")
