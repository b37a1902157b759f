"""The table of a bench spread over device calls (``bench/sweep.sh``), as markdown for
docs/results.md: per level and over all, the problems finished of those selected, the correct ones,
the geomean over torch.compile with its 95% interval over problems (a sample's interval: the
finished problems of a ``--order shuffled`` bench are a uniform sample of the selection), the
problems below 0.97x compile where compile's own output is correct, those where it is not, and
the wall seconds per problem.

    python3 bench/sweep_table.py STATE.tgz|RUNS_DIR [--kernelbench KB]

STATE.tgz is ``.devstate/NAME/state.tgz``; with ``--kernelbench`` the selection's size per level is
counted from the checkout (else only finished problems are known).
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path


def bench_rows(runs: Path) -> tuple[dict, list[dict]]:
    """The bench's settings and its finished problems' rows (the one bench run under ``runs``)."""
    from loopwise.core.run import open_run
    from loopwise.kernels.bench.run import KIND

    found = []
    for folder in sorted(p.parent for p in runs.glob("*/run.sqlite")):
        store = open_run(runs, folder.name)
        if store.meta.kind == KIND:
            settings = next(iter(store.events(kind="bench_settings"))).payload
            found.append((settings, [dict(e.payload) for e in store.events(kind="problem_result")]))
        store.close()
    if len(found) != 1:
        raise SystemExit(f"{runs}: expected one bench run, found {len(found)}")
    return found[0]


def _geomean(geo: float | None, ci: list[float] | None, n: int) -> str:
    return f"{geo:.2f}x" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "") + f", n={n}" if geo else "-"


def table(settings: dict, rows: list[dict], selected: dict[int, int] | None = None) -> str:
    from loopwise.kernels.bench.run import aggregate

    table_ = aggregate(rows)
    yardstick = any(t.get("geomean_over_yardstick") for t in table_)
    lines = ["| group | finished / selected | correct | geomean over compile (95% interval) | "
             + ("geomean over best(eager+TF32, compile) | " if yardstick else "")
             + "below 0.97x compile | compile wrong | s per problem |",
             "|---|---|---|---|" + ("---|" if yardstick else "") + "---|---|---|"]
    for line in table_:
        group = line["group"]
        level = int(group.split()[1]) if group.startswith("level") else None
        total = (selected.get(level) if level is not None else sum(selected.values())) if selected else None
        ci = line.get("geomean_over_compile_ci95")
        geo = line["geomean_over_compile"]
        shown = _geomean(geo, ci, line["compile_measured"])
        if yardstick:
            shown += " | " + _geomean(line.get("geomean_over_yardstick"), line.get("geomean_over_yardstick_ci95"),
                                      line.get("yardstick_measured", 0))
        seconds = line.get("seconds_per_problem")
        lines.append(f"| {group} | {line['problems']} / {total if total is not None else '?'} | {line['correct']} | "
                     f"{shown} | {line['below_compile']} | {line['compile_wrong']} | "
                     f"{f'{seconds:.0f}' if seconds is not None else '-'} |")
    head = (f"budget {settings['budget']}, {settings['search']} search, {settings['per_step']} proposals a step, "
            f"order {settings.get('order', 'id')}, levels {','.join(map(str, settings['levels']))}, "
            f"subset {settings['subset']}")
    return head + "\n\n" + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("state", help="a sweep's state.tgz or a runs folder")
    parser.add_argument("--kernelbench", help="the checkout, to count the selection per level")
    args = parser.parse_args(argv)
    path = Path(args.state)
    with tempfile.TemporaryDirectory() as tmp:
        if path.is_file():
            with tarfile.open(path) as tar:
                tar.extractall(tmp, filter="data")
            runs = Path(tmp) / "runs"
        else:
            runs = path
        settings, rows = bench_rows(runs)
    selected = None
    if args.kernelbench:
        from loopwise.kernels.bench.run import select_problems

        selected = {}
        for lv, _, _ in select_problems(args.kernelbench, settings["levels"], settings["subset"]):
            selected[lv] = selected.get(lv, 0) + 1
    sys.stdout.write(table(settings, rows, selected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
