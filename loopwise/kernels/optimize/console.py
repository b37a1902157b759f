"""Console side of ``kernels optimize``: progress while it runs, a table when it ends."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def run_optimize(settings, cfg, *, resume: str | None = None, out: Path | None = None, as_json: bool = False,
                 executor: tuple = ("local", None, None), time_limit: float | None = None) -> int:
    """``executor``: (kind, workers, ray address) as the CLI's --executor, --workers, --ray-address;
    ``time_limit``: seconds after which no new step starts (counted from here)."""
    from loopwise.core.console import console as make_console

    from loopwise.core.execute.dispatch import dispatching

    deadline = time.monotonic() + time_limit if time_limit else None
    console = make_console(stderr=True) if as_json else make_console()
    with dispatching(*executor) as dispatcher:
        return _run(settings, cfg, resume, out, as_json, console, dispatcher, deadline, executor)


def _run(settings, cfg, resume, out, as_json, console, dispatcher, deadline=None,
         executor: tuple = ("local", None, None)) -> int:
    from loopwise.kernels.optimize.loop import OptimizeRun
    from loopwise.kernels.problem import load_problem
    from loopwise.kernels.evaluate.workers import make_judge

    def judge_for(problem):
        return make_judge(problem, cfg, dispatcher)

    def load(spec):
        return load_problem(spec, cfg.kernels.kernelbench)

    if resume:
        run = OptimizeRun.resume(resume, cfg, cfg.store.runs_dir, judge_for, load)
        console.print(f"resuming run [bold]{resume}[/]: {run.tally.evaluations} verdicts replayed from the store")
    else:
        settings.check()
        problem = load(settings.problem)
        run = OptimizeRun.start(settings, cfg, cfg.store.runs_dir, judge_for(problem), problem)
    s = run.s
    console.print(f"run [bold]{run.store.meta.run_id}[/] · {run.problem.name} on {run.judge.device_name} · "
                  f"{s.proposer} proposer, {s.search}, budget {s.budget}, objective {s.objective}")
    with _stoppable(run, console, executor):
        try:
            with console.status("searching") as status:
                ended = run.run(progress=lambda line: status.update(line), deadline=deadline)
        finally:
            run.judge.close()
        path = run.write_best(out)
        summary = run.summary()
    summary["best_path"] = str(path) if path else None
    summary["stopped_by_time_limit"] = not ended
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        _print_summary(console, run, path)
    _print_proposal_failures(console, run.tally)
    if run.stopped:
        from rich.markup import escape

        console.print(f"[yellow]stopped early:[/] {escape(run.stopped)}", soft_wrap=True)
    if not ended:
        from rich.markup import escape

        from loopwise.core.run import continue_line

        console.print(f"[yellow]time limit reached[/] {escape(continue_line(_resume_command(run, executor), _progress(run)))}",
                      soft_wrap=True)
    return 0 if path else 1


def _stoppable(run, console, executor):
    """Ctrl-C or SIGTERM (the CLI raises it): what is stored stays, the run is marked interrupted
    and closed, and the line that continues it is printed unwrapped so it can be pasted."""
    from rich.markup import escape

    from loopwise.core.run import interruptible

    return interruptible(run.store, lambda: _resume_command(run, executor),
                         lambda line: console.print(escape(line), soft_wrap=True), lambda: _progress(run))


def _progress(run) -> str:
    return f"after {run.tally.evaluations} of {run.s.budget} candidates"


def _resume_command(run, executor: tuple) -> str:
    """The command that continues the run, on the executor it ran on (``executor``: as
    :func:`run_optimize`'s)."""
    from loopwise.core.execute.dispatch import executor_options
    from loopwise.core.run import resume_command

    options = []
    if run.s.problem.startswith("kernelbench:"):
        from loopwise.kernels.problem import _find_checkout

        options = ["--kernelbench", str(_find_checkout(run.cfg.kernels.kernelbench))]
    return resume_command("loopwise kernels optimize", run.store.meta.run_id, run.store.run_dir.parent, *options,
                          *executor_options(*executor))


def _print_proposal_failures(console, tally) -> None:
    """The proposals that came back without code: how many, and the first cause of each kind."""
    from rich.markup import escape

    if not (tally.proposal_failures or tally.duplicates or tally.repairs):
        return
    console.print(f"[yellow]{tally.proposals_line()}[/]", soft_wrap=True)
    for reason, detail in sorted(tally.first_failure.items()):
        console.print(f"  {reason}: {escape(detail)}", soft_wrap=True)


def _print_summary(console, run, path) -> None:
    from rich.table import Table

    from loopwise.kernels.device import marked
    from loopwise.kernels.report.terminal import footnote

    table = Table(title=f"{run.problem.name}: {run.tally.line(run.s.budget)}")
    for col in ("node", "parent", "by", "move", "status", "speedup"):
        table.add_column(col)
    best, meaningful = run.best(), run.timing_meaningful()
    for node in run.search.nodes()[1:]:
        e = run.evaluations.get(node.node_id, {})
        speed = marked(f"{e['speedup']:.3f}x", meaningful) if e.get("speedup") and e.get("status") == "correct" else "-"
        mark = " *" if node.node_id == best else ""
        table.add_row(f"{node.node_id}{mark}", str(node.parent_id), run.made_by.get(node.node_id, "-"), node.note,
                      e.get("status", "pending"), speed)
    console.print(table)
    footnote(console, not meaningful)
    for node, review in sorted(run.reviews.items()):  # the reviewer's reading of each suspicious verdict
        said = f"{review['verdict']}: {review['explanation']}" if review.get("verdict") else \
            f"no review ({review.get('detail', '')})"
        console.print(f"reviewer on node {node}: {said}", soft_wrap=True, markup=False)
    if path:
        console.print(f"best candidate (node {best}) written to {path}")
    else:
        console.print("[yellow]no correct candidate found[/]")
