"""Memory plans as a user makes them, each checked by the independent replay: for every model,
batch and target, `loopwise memory plan ... --out PLAN.json` and `loopwise memory verify PLAN.json`
run as whole commands, timed apart.

    python3 bench/memory_verified.py [--models resnet50,mobilenet_v2,bert-base] [--batches 1,32]
                                     [--targets neuroncore-v2] [--out docs/data/memory-verified.csv]
                                     [--timeout 240]

Rows are written as they finish. A plan the planner itself refuses (its replay fails) is a row
with status `refused`, never a number; a plan or a replay that runs past --timeout seconds is a row
with status `skipped` and the seconds it was given.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIELDS = ["model", "batch", "target", "status", "plan_over_compulsory", "compulsory_mb", "plan_mb", "groups",
          "violations", "recounted_mb", "plan_s", "verify_s"]


def _run(args: list[str], timeout: float) -> tuple[subprocess.CompletedProcess | None, float]:
    """The command's result and its seconds; None when it ran past ``timeout`` (then killed)."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "loopwise.cli", *args], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        done = None
    return done, round(time.perf_counter() - t0, 1)


def row_for(model: str, batch: int, target: str, folder: Path, timeout: float = 240) -> dict:
    path = folder / f"{model}-{batch}-{target}.json"
    planned, plan_s = _run(["memory", "plan", f"zoo:{model}", "--batch", str(batch), "--target", target,
                            "--out", str(path), "--json"], timeout)
    row = {"model": model, "batch": batch, "target": target, "plan_s": plan_s}
    if planned is None:
        return {**row, "status": f"skipped: plan past {timeout:g} s"}
    if planned.returncode != 0:
        return {**row, "status": "refused: " + planned.stderr.strip().splitlines()[-1][:200]}
    data = json.loads(planned.stdout)
    checked, verify_s = _run(["memory", "verify", str(path), "--json"], timeout)
    if checked is None:
        return {**row, "status": f"skipped: verify past {timeout:g} s", "verify_s": verify_s}
    verdict = json.loads(checked.stdout) if checked.stdout.strip() else {}
    recounted = verdict.get("recounted_bytes", verdict.get("traffic_bytes"))
    return {**row, "status": "verified" if checked.returncode == 0 else "FAILED", "verify_s": verify_s,
            "plan_over_compulsory": round(data["ratio_to_compulsory"], 3),
            "compulsory_mb": round(data["compulsory_bytes"] / 1e6, 2), "plan_mb": round(data["total_bytes"] / 1e6, 2),
            "groups": len(data["groups"]), "violations": len(verdict.get("violations", [])),
            "recounted_mb": round(recounted / 1e6, 2) if recounted is not None else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert-base")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--targets", default="neuroncore-v2")
    ap.add_argument("--out", default="docs/data/memory-verified.csv")
    ap.add_argument("--timeout", type=float, default=240, help="seconds for one plan or one replay")
    args = ap.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh, tempfile.TemporaryDirectory() as tmp:
        writer = csv.DictWriter(fh, FIELDS)
        writer.writeheader()
        for target in args.targets.split(","):
            for model in args.models.split(","):
                for batch in (int(b) for b in args.batches.split(",")):
                    row = row_for(model, batch, target, Path(tmp), args.timeout)
                    writer.writerow(row)
                    fh.flush()
                    print(" ".join(f"{k}={v}" for k, v in row.items()), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
