"""The training engine's table: held-out reward of the base, the baselines and the tree search on each task, over
several seeds, each method held to the same compute budget: ``--budget`` default stages' worth of generated
samples (loopwise/training/run.py does each (task, seed) in one run,
so every method starts from the same warm-started base).

    source bench/remote_prelude.sh
    python3 bench/training_table.py --tasks arithmetic,sorting --seeds 0,1,2 --budget 12 --depth 3 --preset small --jobs 6

Rows (one per task, seed and method) go to $OUT/training.csv and a mirror under
$LOOPWISE_CACHE_DIR/bench/; runs live in $LOOPWISE_CACHE_DIR/training-runs/, and a later call
resumes an unfinished (task, seed) run where it stopped (``--fresh`` starts over); ``--jobs N`` runs N
(task, seed) pairs at once, each in its own process. $OUT/training.md
has, per task: each method's test reward (mean over seeds, with a 95% t-interval), the tree search's
relative improvement over the base, over grid and over fixed-staged (mean of per-seed ratios, with
their interval), and the knob-direction statistic over the tree's best schedules (capacity knobs
monotone vs regularization knobs oscillating).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

COLUMNS = ["task", "seed", "method", "preset", "budget", "depth", "difficulty", "stages_used", "tune_reward",
           "test_reward", "base_tune_reward", "base_test_reward", "warm_steps", "warm_pass_rate", "seconds", "run_id",
           "schedule", "directions"]
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _write(paths: list[Path], rows: list[dict]) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, path)


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval (nan below two values)."""
    if not values:
        return math.nan, math.nan
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def summary(rows: list[dict]) -> str:
    out = []
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    for task in tasks:
        mine = [r for r in rows if r["task"] == task]
        seeds = sorted({int(r["seed"]) for r in mine})
        methods = list(dict.fromkeys(r["method"] for r in mine))
        by = {(r["method"], int(r["seed"])): r for r in mine}
        out += [f"## {task} (seeds {', '.join(map(str, seeds))}; preset {mine[0]['preset']}, budget {mine[0]['budget']} "
                f"stages, depth {mine[0]['depth']})", "",
                "| method | test reward (mean ± 95%) | vs base | n |", "|---|---|---|---|"]
        base = [float(by[(methods[0], s)]["base_test_reward"]) for s in seeds if (methods[0], s) in by]
        m, h = interval(base)
        out.append(f"| base | {m:.3f} ± {h:.3f} | | {len(base)} |")
        for method in methods:
            vals = [float(by[(method, s)]["test_reward"]) for s in seeds if (method, s) in by]
            rel = [(float(by[(method, s)]["test_reward"]) + 0.01) / (float(by[(method, s)]["base_test_reward"]) + 0.01) - 1
                   for s in seeds if (method, s) in by]
            m, h = interval(vals)
            rm, rh = interval(rel)
            out.append(f"| {method} | {m:.3f} ± {h:.3f} | {rm:+.1%} ± {rh:.1%} | {len(vals)} |")
        if "tree" in methods:
            out.append("")
            for other in ("grid", "staged", "fixed", "random", "tpe", "pbt"):
                pairs = [(float(by[("tree", s)]["test_reward"]), float(by[(other, s)]["test_reward"]))
                         for s in seeds if ("tree", s) in by and (other, s) in by]
                if not pairs:
                    continue
                rel = [(a + 0.01) / (b + 0.01) - 1 for a, b in pairs]
                m, h = interval(rel)
                wins = sum(a > b for a, b in pairs)
                out.append(f"- tree vs {other}: {m:+.1%} ± {h:.1%} relative (test reward + 0.01), "
                           f"higher on {wins} of {len(pairs)} seeds")
            dirs = [r["directions"] for r in mine if r["method"] == "tree" and r["directions"]]
            if dirs:
                from loopwise.training.config import CAPACITY, REGULARIZATION

                counts = {"capacity": {}, "regularization": {}}
                for d in dirs:
                    for item in d.split(";"):
                        knob, _, how = item.partition("=")
                        group = "capacity" if knob in CAPACITY else "regularization" if knob in REGULARIZATION else None
                        if group and how != "constant":
                            counts[group][how] = counts[group].get(how, 0) + 1
                out.append(f"- knob directions along the tree's best schedules (moving knobs only): "
                           f"capacity {counts['capacity'] or 'none moved'}, regularization "
                           f"{counts['regularization'] or 'none moved'}")
        out.append("")
    return "\n".join(out) + "\n"


def run_pair(task: str, seed: int, args: dict, runs_dir: str, started_dir: str) -> list[dict]:
    """One (task, seed) run, resumed where a previous call left it; its rows (one per method)."""
    import torch

    from loopwise.training.run import Settings, TrainingRun

    if args["threads"]:
        torch.set_num_threads(args["threads"])
    marker = Path(started_dir) / f"{task}-{seed}.txt"
    run_id = marker.read_text().strip() if marker.exists() and not args["fresh"] else ""
    if run_id and (Path(runs_dir) / run_id).exists():
        run = TrainingRun.resume(runs_dir, run_id)
    else:
        run = TrainingRun.start(Settings(task, args["methods"], args["budget"], args["depth"], args["preset"], seed,
                                         args["difficulty"], device=args["device"]), runs_dir)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(run.store.meta.run_id)
    t1 = time.monotonic()
    results = run.run(on_stage=lambda m, d, r: print(f"{task} seed {seed} {m}: stage {d}, tune {r.tune_reward:.3f}",
                                                     flush=True))
    w = run.session.warm
    rows = []
    for method, r in results.items():
        rows.append({"task": task, "seed": seed, "method": method, "preset": args["preset"], "budget": args["budget"],
                     "depth": args["depth"], "difficulty": run.session.difficulty, "stages_used": r["stages_used"],
                     "tune_reward": r["tune_reward"], "test_reward": r["test_reward"],
                     "base_tune_reward": r["base_tune_reward"], "base_test_reward": r["base_test_reward"],
                     "warm_steps": w.get("steps"), "warm_pass_rate": w.get("pass_rate"),
                     "seconds": round(time.monotonic() - t1, 1), "run_id": run.store.meta.run_id,
                     "schedule": " | ".join(f"lr={c['learning_rate']:g},beta={c['beta']:g},T={c['temperature']:g},"
                                            f"d={c['difficulty']},len={c['max_completion_length']},"
                                            f"G={c['num_generations']},steps={c['steps']}" for c in r["configs"]),
                     "directions": ";".join(f"{k}={v}" for k, v in (r.get("directions") or {}).items())})
    run.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="arithmetic,sorting,countdown,rg_chain_sum")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default="tree,fixed,staged,grid,random,tpe,pbt")
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--difficulty", type=int, default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--jobs", type=int, default=1,
                    help="(task, seed) runs at once, each in its own process (they share the GPU; training is "
                         "not timed, so sharing changes no result)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no new (task, seed) after this many seconds")
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "bench_out"))
    cache = Path(os.environ.get("LOOPWISE_CACHE_DIR") or ".loopwise-cache") / "bench"
    # Runs (checkpoints: megabytes per stage) live beside bench/, whose rows alone travel back
    # from the device (bench/lane.sh); a warm machine still resumes them.
    runs_dir, started_dir = cache.parent / "training-runs", cache.parent / "training-started"
    rows = [] if args.fresh else _read(cache / "training.csv")
    done = {(r["task"], int(r["seed"])) for r in rows}
    todo = [(task, int(seed)) for task in args.tasks.split(",") for seed in args.seeds.split(",")
            if (task, int(seed)) not in done]
    shared = {"methods": tuple(m for m in args.methods.split(",") if m), "budget": args.budget, "depth": args.depth,
              "preset": args.preset, "difficulty": args.difficulty, "device": args.device, "fresh": args.fresh,
              "threads": max(1, (os.cpu_count() or 2) // args.jobs) if args.jobs > 1 else 0}
    t0 = time.monotonic()

    def finished(pair_rows: list[dict]) -> None:
        rows.extend(pair_rows)
        rows.sort(key=lambda r: (r["task"], int(r["seed"])))
        _write([out / "training.csv", cache / "training.csv"], rows)
        print(summary(rows), flush=True)

    if args.jobs <= 1:
        for task, seed in todo:
            if time.monotonic() - t0 > args.budget_s:
                print(f"--budget-s {args.budget_s} reached; run again to resume", flush=True)
                break
            finished(run_pair(task, seed, shared, str(runs_dir), str(started_dir)))
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(run_pair, task, seed, shared, str(runs_dir), str(started_dir)): (task, seed)
                       for task, seed in todo}
            for future in cf.as_completed(futures):
                try:
                    finished(future.result())
                except Exception as exc:  # noqa: BLE001 - one failed pair must not lose the others' rows
                    print(f"{futures[future]} failed: {type(exc).__name__}: {exc}", flush=True)
    _finish(out, cache, rows)
    return 0


def _finish(out: Path, cache: Path, rows: list[dict]) -> None:
    if rows:
        _write([out / "training.csv", cache / "training.csv"], rows)
        (out / "training.md").write_text(summary(rows))


if __name__ == "__main__":
    sys.exit(main())
