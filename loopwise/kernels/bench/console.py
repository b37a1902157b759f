"""Console side of ``kernels bench``: a progress bar over problems, the table, the report's path."""

from __future__ import annotations

import json
import sys


def run_bench(settings, cfg, *, resume: str | None = None, as_json: bool = False,
              executor: tuple = ("local", None, None)) -> int:
    """``executor``: (kind, workers, ray address) as the CLI's --executor, --workers, --ray-address."""
    from loopwise.core.console import console as make_console
    from rich.markup import escape

    from loopwise.core.execute.dispatch import dispatching, executor_options
    from loopwise.core.run import interruptible, resume_command
    from loopwise.kernels.bench.run import Bench, order_problems, select_problems
    from loopwise.kernels.report.bench_html import build_report
    from loopwise.kernels.problem import _find_checkout
    from loopwise.kernels.report.terminal import progress

    console = make_console(stderr=True) if as_json else make_console()
    if resume:
        bench = Bench.resume(resume, cfg, console)
        settings = bench.s
    # a bad selection or worker list is refused before anything is recorded
    checkout = _find_checkout(cfg.kernels.kernelbench)
    problems = order_problems(select_problems(checkout, settings.levels, settings.subset), settings.order)
    with dispatching(*executor) as dispatcher:
        if not resume:
            bench = Bench.start(settings, cfg, console)
        s = bench.s
        where = (f"{len(dispatcher.workers)} worker(s) of {executor[0]}" if dispatcher
                 else f"this process ({cfg.kernels.device})")
        order = "" if s.order == "id" else f", {s.order} order"
        console.print(f"bench [bold]{bench.store.meta.run_id}[/] · {len(problems)} problems ({s.subset} of levels "
                      f"{','.join(map(str, s.levels))}{order}) · budget {s.budget} each · {where}")

        def resume_line() -> str:
            return resume_command("loopwise kernels bench", bench.store.meta.run_id, bench.store.run_dir.parent,
                                  "--kernelbench", str(checkout), *executor_options(*executor))

        # Ctrl-C or SIGTERM: finished problems are stored, the run says how to continue
        with interruptible(bench.store, resume_line, lambda line: console.print(escape(line), soft_wrap=True),
                           lambda: f"after {len(bench.rows)} of {len(problems)} problems"):
            with progress(console) as prog:
                task = prog.add_task("problems", total=len(problems), completed=len(bench.rows))

                def advance(row: dict) -> None:
                    best = f"{row['best_speedup']:.2f}x" if row.get("best_speedup") else "none correct"
                    prog.update(task, advance=1, description=f"{row.get('problem', '')[:40]} {best}")
                    if not console.is_terminal:  # a log file: a line per finished problem
                        over = f", {row['over_compile']:.2f}x compile" if row.get("over_compile") else ""
                        over += " (compile's output wrong)" if row.get("compile_correct") is False else ""
                        console.print(escape(f"{len(bench.rows)}/{len(problems)} {row.get('problem', '')}: "
                                             f"{best} eager{over}{' · ' + row['error'] if row.get('error') else ''}"),
                                      soft_wrap=True)

                rows = bench.run(problems, dispatcher, progress=advance)
            path = build_report(bench.store)
    _print_table(console, bench.store.meta.run_id, rows, path, as_json)
    return 0


def _print_table(console, run_id: str, rows: list[dict], path, as_json: bool) -> None:
    """The bench's table (or its JSON) and the report's path."""
    from rich.table import Table

    from loopwise.kernels.bench.run import aggregate
    from loopwise.kernels.device import MARK
    from loopwise.kernels.report.bench_html import table_rows
    from loopwise.kernels.report.terminal import footnote

    table = aggregate(rows)
    meaningful = all(r.get("timing_meaningful", True) for r in rows)
    if as_json:
        sys.stdout.write(json.dumps({"run_id": run_id, "table": table, "problems": rows,
                                     "timing_meaningful": meaningful, "report": str(path)}, indent=2,
                                    default=str) + "\n")
        return
    cols, trows = table_rows(table)
    out = Table(title="best correct candidate vs eager / torch.compile (no correct candidate: the reference)"
                + ("" if meaningful else f" {MARK}"))
    for c in cols:
        out.add_column(c)
    for r in trows:
        out.add_row(*r)
    console.print(out)
    footnote(console, not meaningful)
    console.print(f"report: {path}")
