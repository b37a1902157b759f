"""The memory engine's full matrix: every zoo model x batch x target planned as a user plans it
(`loopwise memory plan zoo:MODEL --batch B --target T --out PLAN.json`) and replayed by the
independent verifier (`loopwise memory verify PLAN.json`), both as whole commands.

    OMP_NUM_THREADS=1 python3 bench/memory_matrix.py [--batches 1,8,32] [--targets ...] [--models ...]
                                                     [--timeout 180] [--out docs/data/DATE-memory-matrix-COMMIT.csv]
    python3 bench/memory_matrix.py --tables docs/data/DATE-memory-matrix-COMMIT.csv   # markdown tables of a file

The file is named after the commit it ran on unless --out is given. Rows are appended as they
finish, and a cell already in the file is not run again, so a stopped run continues. A plan or a
replay that runs past --timeout seconds is a row with status `timeout` and no number.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_verified import FIELDS, row_for  # noqa: E402

from loopwise.memory.zoo import ZOO  # noqa: E402

TARGETS = ("neuroncore-v2", "gpu-sm-shared", "scratchpad-1mib", "scratchpad-96mib")


def _default_out() -> Path:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return Path("docs/data") / f"{datetime.date.today().isoformat()}-memory-matrix-{commit or 'unknown'}.csv"


def _done(out: Path) -> set[tuple[str, str, str]]:
    if not out.exists():
        return set()
    with out.open() as fh:
        return {(r["model"], r["batch"], r["target"]) for r in csv.DictReader(fh)}


TABLE_TARGETS = ("neuroncore-v2", "scratchpad-96mib", "scratchpad-1mib", "gpu-sm-shared")


def _cell(row: dict | None) -> str:
    if row is None:
        return "not run"
    if row["status"] != "verified":
        return row["status"].split(":", 1)[0]
    return f"{float(row['plan_over_compulsory']):.3f} ({float(row['plan_s']):.0f} s)"


def tables(path: Path) -> str:
    """The matrix file as one markdown table per batch: plan / compulsory and plan seconds per model and target."""
    with path.open() as fh:
        rows = {(r["model"], r["batch"], r["target"]): r for r in csv.DictReader(fh)}
    models = [m for m in ZOO if any(k[0] == m for k in rows)]
    batches = sorted({int(k[1]) for k in rows})
    out = []
    for batch in batches:
        out += [f"**batch {batch}** (plan / compulsory, plan command seconds)", "",
                "| model | " + " | ".join(TABLE_TARGETS) + " |", "|---|" + "---|" * len(TABLE_TARGETS)]
        out += ["| " + " | ".join([m] + [_cell(rows.get((m, str(batch), t))) for t in TABLE_TARGETS]) + " |"
                for m in models]
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=Path, default=None, help="print a finished matrix file as markdown tables and stop")
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--timeout", type=float, default=180, help="seconds for one plan or one replay")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.tables is not None:
        if not args.tables.is_file():
            sys.exit(f"error: no matrix file at {args.tables}")
        print(tables(args.tables))
        return
    out = args.out or _default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _done(out)
    fresh = not out.exists()
    with out.open("a", newline="") as fh, tempfile.TemporaryDirectory() as tmp:
        writer = csv.DictWriter(fh, FIELDS)
        if fresh:
            writer.writeheader()
        for batch in (int(b) for b in args.batches.split(",")):
            for target in args.targets.split(","):
                for model in args.models.split(","):
                    if (model, str(batch), target) in done:
                        continue
                    row = row_for(model, batch, target, Path(tmp), args.timeout)
                    if row["status"].startswith("skipped"):
                        row["status"] = "timeout: " + row["status"].split(": ", 1)[1]
                    writer.writerow(row)
                    fh.flush()
                    print(" ".join(f"{k}={v}" for k, v in row.items()), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
