"""Writes the finished problems of every `kernels bench` run under a runs folder as one CSV: also
those of a bench stopped before its end (a device command's time limit), since each problem's row
is stored when it finishes. Each row names the GPU its problem was judged on (a sweep's calls may
get different ones).

    python3 bench/bench_rows.py RUNS_DIR OUT.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

FIELDS = ("bench", "problem", "device", "evaluations", "best_speedup", "eager_ms", "compile_ms", "compile_status",
          "compile_correct", "compile_message", "best_ms",
          "over_compile", "clock", "best_kernelbench_ms", "best_gpu_ms", "best_launch_ms", "compile_kernelbench_ms",
          "compile_gpu_ms", "compile_launch_ms", "over_compile_kernelbench", "over_compile_gpu", "over_compile_steady",
          "eager_tf32_ms", "over_yardstick", "seconds", "error", "failures")


def device_of(runs_dir: str | Path, run_id: str | None) -> str:
    """The GPU the optimize run ``run_id`` judged on (its reference event), "" where not known."""
    from loopwise.core.run import open_run

    if not run_id or not (Path(runs_dir) / run_id / "run.sqlite").is_file():
        return ""
    store = open_run(runs_dir, run_id)
    try:
        return next((str(e.payload.get("device") or "") for e in store.events(kind="reference")), "")
    finally:
        store.close()


def main(runs_dir: str, out: str) -> int:
    from loopwise.core.run import open_run

    rows = []
    for folder in sorted(p.parent for p in Path(runs_dir).glob("*/run.sqlite")):
        store = open_run(runs_dir, folder.name)
        for event in store.events(kind="problem_result"):
            row = dict(event.payload)
            row["bench"] = folder.name
            row["device"] = device_of(runs_dir, row.get("run_id"))
            rows.append({k: row.get(k, "") for k in FIELDS})
        store.close()
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} problem rows from {runs_dir} to {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
