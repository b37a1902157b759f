"""Search strategies side by side with the expert proposer (issue: MCTS vs greedy vs random).

For each problem and each strategy, runs `loopwise kernels optimize` logic in-process with the same
budget and seed, and records the best speedup and the number of evaluations needed to reach 95% of
it. Writes $OUT/search.csv and $OUT/search.md (rows as they finish).

    source bench/remote_prelude.sh; python3 bench/search_gpu.py --budget 20 \
        --problems kernelbench:1/19,kernelbench:1/23,kernelbench:1/26,kernelbench:1/29,kernelbench:1/40
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path


def run_one(spec: str, strategy: str, budget: int, seed: int, cfg, runs_dir: str) -> dict:
    from loopwise.kernels.evaluate.judge import Judge
    from loopwise.kernels.optimize import Settings
    from loopwise.kernels.optimize_run import OptimizeRun
    from loopwise.kernels.problem import load_problem

    problem = load_problem(spec, cfg.kernels.kernelbench)
    settings = Settings(problem=spec, proposer="expert", search=strategy, budget=budget, seed=seed)
    judge = Judge(problem, cfg.kernels.eval, device=cfg.kernels.device, spares=1)
    t0 = time.perf_counter()
    try:
        run = OptimizeRun.start(settings, cfg, runs_dir, judge, problem)
        run.run()
    finally:
        judge.close()
    speeds = [e["speedup"] if e["status"] == "correct" else None for _, e in sorted(run.evaluations.items())]
    best = max((s for s in speeds if s), default=None)
    reach = next((i + 1 for i, s in enumerate(speeds) if best and s and s >= 0.95 * best), None)
    run.store.close()
    return {"problem": problem.name, "strategy": strategy, "budget": budget, "seed": seed,
            "evaluations": len(speeds), "correct": sum(1 for s in speeds if s), "best_speedup": best,
            "evals_to_95pct": reach, "seconds": round(time.perf_counter() - t0, 1), "run_id": run.store.meta.run_id}


def main() -> int:
    from loopwise.core.config import load_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", required=True, help="comma-separated problem specs")
    ap.add_argument("--strategies", default="mcts,greedy,random")
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kernelbench", default="third_party/KernelBench")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no new run after this many seconds")
    ap.add_argument("--set", action="append", default=[], help="config overrides, as for the CLI")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(None, [f"kernels.kernelbench={args.kernelbench}", f"kernels.device={args.device}",
                             f"store.runs_dir={out / 'runs'}"] + args.set)
    rows, t0 = [], time.monotonic()
    for spec in args.problems.split(","):
        for strategy in args.strategies.split(","):
            if time.monotonic() - t0 > args.budget_s:
                print(f"--budget-s {args.budget_s} reached; stopping", flush=True)
                break
            rows.append(run_one(spec, strategy, args.budget, args.seed, cfg, str(out / "runs")))
            print(rows[-1], flush=True)
            _write(out, rows)
    return 0


def _write(out: Path, rows: list[dict]) -> None:
    with open(out / "search.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| problem | strategy | best speedup | evaluations to 95% of it | correct / judged | s |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        best = f"{r['best_speedup']:.3f}x" if r["best_speedup"] else "-"
        lines.append(f"| {r['problem']} | {r['strategy']} | {best} | {r['evals_to_95pct'] or '-'} | "
                     f"{r['correct']} / {r['evaluations']} | {r['seconds']} |")
    (out / "search.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
