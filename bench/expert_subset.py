"""The expert proposer against eager, torch.compile (default and max-autotune) and eager with TF32
on a fixed KernelBench subset, in two tracks (the kernels engine's speed table in docs/results.md).

Selection rule, written down on 2026-11-30 before any run of this script: bench/baseline_table.py's
rule with stride 5 instead of 8. In each level the targets are ids 1, 6, 11, ...; each target takes
the smallest id >= it, not taken yet, whose get_inputs() tensors total at most 1 GiB (shapes read on
the meta device) and which loads. On the KernelBench checkout of third_party/ this gives the
SUBSET below: 19 level-1, 20 level-2 and 10 level-3 problems (the 1 GiB limit leaves out every
level-1 activation, reduction, scan and pooling problem at the published sizes).

Tracks: ``fp32`` = precision policy fp32 + strict tolerance; ``relaxed`` = relaxed + legacy.

Per problem and track, the `kernels optimize` loop runs in this process (expert proposer, MCTS,
``--budget`` candidates, profiling off unless ``--profiling``: a profile costs ~20 s on an H200):
the best correct candidate's time against the judge's eager time. A problem no template covers
gets no candidate; it is reported as uncovered and counts as eager (1.0x over eager) in the
all-problem geomeans. torch.compile, max-autotune and eager+TF32 come from bench/baseline_table.py's
rows for the same problems (``--baselines``; the same timing protocol): our time is compared with
theirs directly. Column best_plan names the template (variant or plan) of the best candidate.

Rows go to $OUT/expert_subset.csv and a mirror under $LOOPWISE_CACHE_DIR/bench/ as they finish; a
later call skips rows already done (``--fresh`` redoes them). $OUT/expert_subset.md has, per level
and track: coverage, geomean over eager (covered problems, and all), over compile, over
max-autotune, over the best of eager+TF32 and compile (the relaxed track's yardstick), fast_1 (share
of problems with a correct candidate faster than eager) and the candidates' statuses.

    source bench/remote_prelude.sh
    python3 bench/baseline_table.py --selection expert --max-autotune --tf32 --budget-s 480   # baselines first
    python3 bench/expert_subset.py --tracks fp32,relaxed --budget 8 --baselines $LOOPWISE_CACHE_DIR/bench/baselines.csv
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

SUBSET: dict[int, tuple[int, ...]] = {
    1: (1, 6, 12, 16, 40, 50, 54, 55, 56, 58, 59, 60, 61, 66, 71, 77, 81, 86, 95),
    2: (1, 6, 11, 16, 21, 27, 31, 36, 41, 46, 51, 56, 61, 66, 71, 76, 81, 86, 91, 96),
    3: (1, 6, 11, 16, 21, 26, 31, 36, 41, 46),
}
TRACKS = {"fp32": ("fp32", "strict"), "relaxed": ("relaxed", "legacy")}
KEY = ("level", "id", "track")  # a row per problem and track (bench/baseline_table.py's row store)
COLUMNS = ["level", "id", "problem", "track", "covered", "template", "reason", "budget", "evaluations", "correct",
           "statuses", "best_speedup", "best_ms", "eager_ms", "compile_ms", "max_autotune_ms", "eager_tf32_ms",
           "over_compile", "over_max_autotune", "over_best_tf32_or_compile", "run_id", "seconds", "finished_at",
           "best_plan"]


def run_problem(level: int, pid: int, path: Path, track: str, args, cfg_overrides: list[str]) -> dict:
    """The expert's search on one problem under one track; the row (baselines joined later)."""
    from loopwise.config import load_config
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.expert.capture import capture
    from loopwise.kernels.optimize import OptimizeRun, Settings
    from loopwise.kernels.problem import load_problem

    precision, tolerance = TRACKS[track]
    row: dict = {"level": level, "id": pid, "problem": path.stem, "track": track, "budget": args.budget}
    t0 = time.perf_counter()
    problem = load_problem(str(path))
    pattern = capture(problem)
    row.update(template=pattern.kind, reason=pattern.reason[:200])
    if pattern.kind == "unsupported":
        row.update(covered=False, evaluations=0, correct=0, statuses="", seconds=round(time.perf_counter() - t0, 1))
        return row
    cfg = load_config(None, [f"kernels.eval.precision={precision}", f"kernels.eval.tolerance={tolerance}",
                             f"kernels.device={args.device}", f"store.runs_dir={Path(args.out) / 'runs'}",
                             *cfg_overrides])
    settings = Settings(problem=str(path), proposer="expert", search="mcts", budget=args.budget, seed=args.seed,
                        profiling=args.profiling)
    with LocalJudge(problem, cfg.kernels.eval, device=cfg.kernels.device, spares=2) as judge:
        run = OptimizeRun.start(settings, cfg, str(Path(args.out) / "runs"), judge, problem)
        try:
            ended = run.run(deadline=args.deadline)
        finally:
            run.store.close()
    evals = list(run.evaluations.values())
    best = run.best()
    if not ended:  # cut by --stop-s: not a row of the subset (its candidates stay in the run's store)
        row["cut"] = f"--stop-s reached after {len(evals)} of {args.budget} candidates (run {run.store.meta.run_id})"
    row.update(covered=True, evaluations=len(evals), correct=sum(e["status"] == "correct" for e in evals),
               statuses=" ".join(f"{k}:{v}" for k, v in sorted(Counter(e["status"] for e in evals).items())),
               run_id=run.store.meta.run_id, seconds=round(time.perf_counter() - t0, 1))
    if best is not None:
        data = run.evaluations[best]["data"]
        row["best_speedup"] = run.evaluations[best]["speedup"]
        plan = re.match(r'\s*"""(\w+):', run.sources[best])
        row["best_plan"] = plan.group(1) if plan else ""
        row["best_ms"] = ((data.get("timing") or {}).get("median_ms"))
        row["eager_ms"] = ((data.get("reference_timing") or {}).get("median_ms"))
    return row


def join_baselines(row: dict, baselines: dict[str, dict]) -> dict:
    """Our best time against compile, max-autotune and eager+TF32 of the baseline table (an
    uncovered problem, or one without a correct candidate, runs as eager)."""
    base = baselines.get(f"{row['level']}/{row['id']}") or {}
    ours = _num(row.get("best_ms")) or _num(base.get("eager_ms"))
    for name in ("compile_ms", "max_autotune_ms", "eager_tf32_ms"):
        row[name] = _num(base.get(name))
    if not _num(row.get("best_ms")) and _num(base.get("eager_ms")):
        row["eager_ms"] = row.get("eager_ms") or _num(base.get("eager_ms"))
    if ours:
        for key, theirs in (("over_compile", row["compile_ms"]), ("over_max_autotune", row["max_autotune_ms"])):
            row[key] = theirs / ours if theirs else None
        yard = [t for t in (row["eager_tf32_ms"], row["compile_ms"]) if t]
        row["over_best_tf32_or_compile"] = min(yard) / ours if yard else None
    return row


# ---------------------------------------------------------------------------------------------
# rows and the summary


def _num(value) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows: dict[str, dict], command: str) -> str:
    def f(v, fmt="{:.2f}"):
        return fmt.format(v) if v is not None else "-"

    lines = ["# Expert proposer on the KernelBench subset", "",
             f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}; command: `{command}`",
             "- subset: bench/expert_subset.py's rule (every 5th id, <= 1 GiB of inputs); speedups are median "
             "times; an uncovered problem, or one without a correct candidate, counts as eager", "",
             "| track | level | problems | covered | correct candidates / judged | over eager: covered / all | "
             "over compile | over max-autotune | over best(eager+TF32, compile) | fast_1 | statuses |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for track in TRACKS:
        for level in sorted({int(r["level"]) for r in rows.values()}):  # level 0: problem files given
            sub = [r for r in rows.values() if r["track"] == track and int(r["level"]) == level]
            if not sub:
                continue
            covered = [r for r in sub if str(r.get("covered")) == "True"]
            speed = [_num(r.get("best_speedup")) for r in covered]
            everyone = [_num(r.get("best_speedup")) or 1.0 for r in sub]
            statuses: Counter = Counter()
            for r in sub:
                for part in (r.get("statuses") or "").split():
                    name, n = part.split(":")
                    statuses[name] += int(n)
            fast = sum(1 for r in sub if (_num(r.get("best_speedup")) or 0) > 1.0)
            # "graph": a partitioned forward, fused passes beside what stays in PyTorch
            partial = sum(1 for r in covered if r.get("template") == "graph")
            lines.append(
                f"| {track} | {level} | {len(sub)} | {len(covered)}{f' ({partial} partial)' if partial else ''} | "
                f"{sum(int(r.get('correct') or 0) for r in sub)} / {sum(int(r.get('evaluations') or 0) for r in sub)} | "
                f"{f(_geomean(speed))} / {f(_geomean(everyone))} | "
                f"{f(_geomean(_num(r.get('over_compile')) for r in sub))} | "
                f"{f(_geomean(_num(r.get('over_max_autotune')) for r in sub))} | "
                f"{f(_geomean(_num(r.get('over_best_tf32_or_compile')) for r in sub))} | "
                f"{fast / len(sub):.0%} | {' '.join(f'{k} {v}' for k, v in sorted(statuses.items())) or '-'} |")
    lines += ["", "| track | problem | template | correct / judged | best x eager | x compile | x max-autotune | "
              "x best(TF32, compile) | note |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows.values(), key=lambda r: (r["track"], int(r["level"]), int(r["id"]))):
        plan = r.get("best_plan")
        lines.append(f"| {r['track']} | L{r['level']}/{r['problem']} | {r.get('template')}"
                     f"{f' (best: {plan})' if plan and plan != r.get('template') else ''} | "
                     f"{r.get('correct') or 0} / {r.get('evaluations') or 0} | {f(_num(r.get('best_speedup')))} | "
                     f"{f(_num(r.get('over_compile')))} | {f(_num(r.get('over_max_autotune')))} | "
                     f"{f(_num(r.get('over_best_tf32_or_compile')))} | "
                     f"{(r.get('reason') or '').replace('|', '/')[:160]} |")
    return "\n".join(lines) + "\n"


def problem_list(args) -> list[tuple[int, int, Path]]:
    """(level, id, file) of the subset, or of --problems (LEVEL/ID of the subset, or problem files)."""
    root = Path(args.kernelbench) / "KernelBench"
    wanted = [p for p in args.problems.split(",") if p]
    out = []
    for spec in wanted or [f"{lv}/{pid}" for lv in (1, 2, 3) for pid in SUBSET[lv]]:
        if spec.endswith(".py"):
            out.append((0, len(out), Path(spec)))
            continue
        level, pid = (int(x) for x in spec.split("/"))
        match = sorted((root / f"level{level}").glob(f"{pid}_*.py"))
        if not match:
            raise SystemExit(f"level{level} problem {pid} not found under {root}")
        out.append((level, pid, match[0]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracks", default="fp32,relaxed")
    ap.add_argument("--budget", type=int, default=8, help="candidates judged per problem and track")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profiling", default="none", choices=("none", "proactive", "all", "raw"))
    ap.add_argument("--problems", default="", help="LEVEL/ID of the subset, or problem files (default: the subset)")
    ap.add_argument("--kernelbench", default=str(REPO / "third_party" / "KernelBench"))
    ap.add_argument("--baselines", default="", help="bench/baseline_table.py rows (CSV) for the same problems")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no new problem after this many seconds")
    ap.add_argument("--stop-s", type=float, default=None,
                    help="stop a problem's search (between steps) after this many seconds; a problem cut so "
                         "is not written, and runs again next time")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench_out")
    ap.add_argument("--set", action="append", default=[], help="config overrides, as for the CLI")
    args = ap.parse_args(argv)
    from baseline_table import load_rows, save_rows

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mirror = Path(os.environ.get("LOOPWISE_CACHE_DIR") or ".loopwise-cache") / "bench"
    mirror.mkdir(parents=True, exist_ok=True)
    paths = [out / "expert_subset.csv", mirror / "expert_subset.csv"]
    rows = {} if args.fresh else load_rows(paths, key=KEY)
    baselines = load_rows([Path(args.baselines)]) if args.baselines else {}
    # rows judged before their problem's baselines were measured get them now (the join is idempotent)
    rows = {key: join_baselines(row, baselines) for key, row in rows.items()} if baselines else rows
    tracks = [t for t in args.tracks.split(",") if t]
    unknown = [t for t in tracks if t not in TRACKS]
    if unknown:
        ap.error(f"unknown track(s): {', '.join(unknown)} (fp32, relaxed)")
    t0, stopped = time.monotonic(), ""
    args.deadline = t0 + args.stop_s if args.stop_s else None
    try:
        for level, pid, path in problem_list(args):
            for track in tracks:
                key = f"{level}/{pid}/{track}"
                if key in rows:
                    continue
                if time.monotonic() - t0 > args.budget_s:
                    stopped = f"--budget-s {args.budget_s} reached"
                    break
                try:
                    row = run_problem(level, pid, path, track, args, args.set)
                except Exception as exc:  # noqa: BLE001 - one problem's failure is a row, not the end
                    row = {"level": level, "id": pid, "problem": path.stem, "track": track, "covered": None,
                           "reason": f"run failed: {type(exc).__name__}: {exc}"[:200]}
                if row.get("cut"):
                    stopped = row["cut"]
                    print(f"{key}: {stopped}; not written, it runs again next time", flush=True)
                    break
                row = join_baselines(row, baselines)
                row["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
                rows[key] = {k: (str(v) if isinstance(v, bool) else v) for k, v in row.items()}
                save_rows(paths, rows, COLUMNS)
                print({k: row.get(k) for k in ("level", "id", "track", "template", "correct", "evaluations",
                                               "best_speedup", "over_compile", "seconds")}, flush=True)
            if stopped:
                break
    finally:
        if rows:
            save_rows(paths, rows, COLUMNS)
            (out / "expert_subset.md").write_text(summary(rows, " ".join(["python3", *sys.argv])))
    print(f"{len(rows)} row(s){'; ' + stopped + ', run again to resume' if stopped else ''}; wrote "
          f"{paths[0]} and expert_subset.md", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
