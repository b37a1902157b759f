"""Every judged candidate of some `kernels optimize` run stores, one CSV row each.

    python3 bench/run_candidates.py OUT.csv RUN_DIR_OR_SQLITE...

Columns: run_id, problem (level/id from the run's problem path), track (the judge's policy: fp32
or relaxed), node, note (the proposal's note: template and moves), status, speedup_over_eager.
Rows are appended to OUT.csv; a run already in it is skipped, so the same folders can be passed
after every device call. Runs are taken in order of their id (a timestamp).
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
import sys
from pathlib import Path

COLUMNS = ["run_id", "problem", "track", "node", "note", "status", "speedup_over_eager"]


def _stores(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        else:
            found.extend(p.rglob("run.sqlite"))
    return sorted(set(found), key=lambda s: s.parent.name)


def rows_of(store: Path) -> list[dict]:
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        events = con.execute("SELECT kind, payload FROM events ORDER BY seq").fetchall()
    finally:
        con.close()
    problem, notes, rows = "", {}, []
    for kind, payload in events:
        data = json.loads(payload)
        if kind == "settings":
            m = re.search(r"level(\d+)/(\d+)_", data.get("problem", ""))
            problem = f"{m.group(1)}/{m.group(2)}" if m else data.get("problem", "")
        elif kind == "proposal":
            notes[len(notes) + 1] = data.get("note", "")
        elif kind == "evaluation":
            ev, node = data.get("evaluation", {}), data.get("node")
            speedup = ev.get("speedup")
            rows.append({
                "run_id": store.parent.name, "problem": problem, "track": ev.get("policy", ""),
                "node": node, "note": notes.get(node, ""), "status": ev.get("status", ""),
                "speedup_over_eager": f"{speedup:.4f}" if isinstance(speedup, (int, float)) else "",
            })
    return rows


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    seen: set[str] = set()
    if out.exists():
        with out.open(newline="") as f:
            seen = {r["run_id"] for r in csv.DictReader(f)}
    new = [r for s in _stores(argv[1:]) if s.parent.name not in seen for r in rows_of(s)]
    write_header = not out.exists() or out.stat().st_size == 0
    with out.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if write_header:
            w.writeheader()
        w.writerows(new)
    print(f"{len(new)} candidate row(s) from {len({r['run_id'] for r in new})} new run(s) -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
