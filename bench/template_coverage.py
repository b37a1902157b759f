"""The expert's template coverage of a folder of problems (a generated suite, a KernelBench level):
per problem the pattern its capture finds (the template kind, or ``unsupported`` with the reason),
then the tally of kinds, how many problems have a template, and the most frequent refusal reasons.

A refusal reason is cut to its kind (:func:`reason_key`), so the reasons that differ only in a name
or a shape count together. No GPU needed (the capture runs on the meta device).

    python -m loopwise kernels generate --out /tmp/gen --count 200 --seed 0
    python bench/template_coverage.py /tmp/gen [--top 12] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.generate import variants
from loopwise.kernels.problem import load_problem


def reason_key(reason: str) -> str:
    """The reason without its particulars: each ``;``-separated part (the whole-forward reason,
    then the partitioner's) cut at its first ``(``, names in quotes and plain numbers replaced, so
    one kind of refusal is one row of the tally."""
    parts = []
    for part in reason.split(";"):
        head = re.sub(r"'[^']*'", "'…'", part.split("(", 1)[0].strip())
        parts.append(re.sub(r"\b\d+\b", "N", head))
    return "; ".join(p for p in parts if p)


def problem_row(path: Path) -> dict:
    """``{"name", "kind", "templates", "reason", "seconds"}`` of the problem at ``path``."""
    start = time.perf_counter()
    try:
        pattern = capture(load_problem(str(path)))
        kinds, kind, reason = variants(pattern), pattern.kind, pattern.reason
    except Exception as error:  # noqa: BLE001 - a problem that fails to load is a row, not the end
        kinds, kind, reason = [], "error", f"{type(error).__name__}: {str(error)[:200]}"
    return {"name": path.stem, "kind": kind, "templates": kinds, "reason": "" if kinds else reason,
            "seconds": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a folder of problem files (searched recursively for *.py)")
    parser.add_argument("--top", type=int, default=12, help="refusal reasons to list")
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()
    rows = []
    for path in sorted(Path(args.folder).rglob("*.py"), key=lambda p: p.name):
        row = problem_row(path)
        rows.append(row)
        print(f"{row['name']:60s} {row['kind']:12s} {row['reason'][:110]}", flush=True)
    covered = [r for r in rows if r["templates"]]
    print(f"\n{len(covered)}/{len(rows)} problems have a template")
    print("by kind: " + ", ".join(f"{k} {n}" for k, n in Counter(r["kind"] for r in covered).most_common()))
    print("top refusal reasons:")
    for reason, n in Counter(reason_key(r["reason"]) for r in rows if not r["templates"]).most_common(args.top):
        print(f"  {n:4d}  {reason}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
