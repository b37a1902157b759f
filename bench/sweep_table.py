"""The table of a bench spread over device calls (``bench/sweep.sh``), as markdown for
docs/results.md: the bench's own table (``kernels bench``'s columns: the geomean over torch.compile
with its 95% interval over problems, a sample's interval since the finished problems of a
``--order shuffled`` bench are a uniform sample of the selection; fast_p; below 0.97x compile;
compile wrong; seconds a problem), its problems column as finished / selected, and the GPUs the
finished problems were judged on (a sweep's calls may get different ones; each problem's figures
come from one).

    python3 bench/sweep_table.py STATE.tgz|RUNS_DIR [--kernelbench KB]

STATE.tgz is ``.devstate/NAME/state.tgz``; with ``--kernelbench`` the selection's size per level is
counted from the checkout (else only finished problems are known).
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from bench_rows import device_of  # this folder's; run as a script, it is on the path


def read_bench(runs: Path):
    """The one bench run under ``runs`` (its optimize runs beside it), as :class:`Bench` reads it."""
    from loopwise.config import load_config
    from loopwise.core.run import open_run
    from loopwise.kernels.bench.run import KIND, Bench

    ids = []
    for folder in sorted(p.parent for p in runs.glob("*/run.sqlite")):
        store = open_run(runs, folder.name)
        if store.meta.kind == KIND:
            ids.append(folder.name)
        store.close()
    if len(ids) != 1:
        raise SystemExit(f"{runs}: expected one bench run, found {len(ids)}")
    bench = Bench.resume(ids[0], load_config(None, [f"store.runs_dir={runs}"]))
    bench.store.close()
    return bench


def table(settings: dict, rows: list[dict], selected: dict[int, int] | None = None,
          devices: dict[str, int] | None = None) -> str:
    from loopwise.kernels.bench.run import aggregate
    from loopwise.kernels.report.bench_html import table_rows

    cols, lines = table_rows(aggregate(rows))
    cols[1] = "finished / selected"
    for line in lines:  # groups "level N" and "all"
        if selected is None:
            total = "?"
        else:
            total = sum(selected.values()) if line[0] == "all" else selected.get(int(line[0].split()[1]), "?")
        line[1] = f"{line[1]} / {total}"
    head = (f"budget {settings['budget']}, {settings['search']} search, {settings['per_step']} proposals a step, "
            f"order {settings['order']}, levels {','.join(map(str, settings['levels']))}, subset {settings['subset']}")
    if devices:
        head += "; judged on " + ", ".join(f"{name or 'an unrecorded GPU'} ({n} problem{'s' * (n != 1)})"
                                           for name, n in sorted(devices.items(), key=lambda kv: (-kv[1], kv[0])))
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + ["| " + " | ".join(line) + " |" for line in lines]
    return head + "\n\n" + "\n".join(out) + "\n"


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
        bench = read_bench(runs)
        rows = list(bench.rows.values())
        devices = Counter(device_of(runs, row.get("run_id")) for row in rows)
    settings = asdict(bench.s)
    selected = None
    if args.kernelbench:
        from loopwise.kernels.bench.run import select_problems

        selected = {}
        for lv, _, _ in select_problems(args.kernelbench, settings["levels"], settings["subset"]):
            selected[lv] = selected.get(lv, 0) + 1
    sys.stdout.write(table(settings, rows, selected, dict(devices)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
