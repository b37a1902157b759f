"""Search strategies side by side with the expert proposer (issue: MCTS vs greedy vs random).

For each problem and each strategy, runs `loopwise kernels optimize` logic in-process with the same
budget and seed, and records the best speedup and the number of evaluations needed to reach 95% of
it. Writes $OUT/search.csv and $OUT/search.md (rows as they finish) and a mirror under
$LOOPWISE_CACHE_DIR/bench/, so a later call on a warm machine skips rows already done.

Each distinct candidate source is judged once per problem and its verdict shared by the strategies
(``--no-memo`` judges every proposal afresh): the strategies are then compared on the same measured
values, so the comparison is about the search, not about timing noise between repeated runs. In the
same way each distinct candidate is profiled once per problem and the profiling modes of the
ablation (``--profiling proactive,all,raw,none``) read that one measurement each through its own
tools (MemoProfiler).

    source bench/remote_prelude.sh; python3 bench/search_gpu.py --budget 20 \
        --problems kernelbench:1/19,kernelbench:1/23,kernelbench:1/26,kernelbench:1/29,kernelbench:1/40

``--sizes reduced`` runs the level-1 problems of bench/agreement_set.py at its reduced sizes (the
official activation tensors are 6 GiB each; see that file) and the others as published.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path


class MemoJudge:
    """A judge that measures each distinct source once and hands out the same verdict after."""

    def __init__(self, judge) -> None:
        self.judge, self.verdicts, self.judged = judge, {}, 0
        self.device, self.device_name = judge.device, judge.device_name

    def evaluate(self, source: str, name: str = "<candidate>"):
        if source not in self.verdicts:
            self.verdicts[source] = self.judge.evaluate(source, name)
            self.judged += 1
        return self.verdicts[source]

    def evaluate_many(self, items: list[tuple[str, str]]) -> list:
        return [self.evaluate(source, name) for source, name in items]

    def precompile(self, sources: list[str]) -> int:
        return 0  # builds nothing ahead: a distinct source is built when it is first judged

    def close(self) -> None:
        self.judge.close()


class MemoProfiler:
    """Measures each distinct candidate (and the reference) once per problem under Nsight Compute;
    every arm of the ablation then reads that same measurement through its own mode (proactive,
    all, raw), as ``profile()`` would: the modes differ only in which tools read the metrics, so
    the arms see the same numbers and the comparison is about what the expert learns from them.
    A reuse runs no Nsight Compute (only the SASS is read again); ``measured`` / ``reused`` count both."""

    def __init__(self) -> None:
        self.folders: dict[tuple, Path] = {}
        self.measured = self.reused = 0

    def __call__(self, problem, candidate, folder, **kw):
        from loopwise.kernels.profile.run import analyze, profile

        key = (problem.name, problem.source, candidate.read_text() if candidate else None, kw.get("precision"))
        if key in self.folders:
            self.reused += 1
            return analyze(self.folders[key], mode=kw.get("mode", "proactive"), problem_name=problem.name,
                           candidate=str(candidate) if candidate else "reference", costs={},
                           notes=["measured once for every arm of the ablation"], write=False)
        report = profile(problem, candidate, folder, **kw)
        self.folders[key] = Path(folder)
        self.measured += 1
        return report


def run_one(spec: str, strategy: str, budget: int, seed: int, cfg, runs_dir: str, judge, problem,
            profiling: str = "none", profile_within: float = 0.9, profiler=None) -> dict:
    from loopwise.kernels.optimize import OptimizeRun, Settings

    settings = Settings(problem=spec, proposer="expert", search=strategy, budget=budget, seed=seed,
                        profiling=profiling, profile_within=profile_within)
    t0 = time.perf_counter()
    run = OptimizeRun.start(settings, cfg, runs_dir, judge, problem)
    if profiler is not None:
        run.profiler = profiler
    measured, reused = (profiler.measured, profiler.reused) if profiler is not None else (0, 0)
    run.run()
    speeds = [e["speedup"] if e["status"] == "correct" else None for _, e in sorted(run.evaluations.items())]
    best = max((s for s in speeds if s), default=None)
    reach = next((i + 1 for i, s in enumerate(speeds) if best and s and s >= 0.95 * best), None)
    profiled = [e for e in run.store.events(kind="profile") if not e.payload.get("skipped")]
    run.store.close()
    return {"spec": spec, "problem": problem.name, "strategy": strategy, "profiling": profiling,
            "profile_within": profile_within, "profiles": len(profiled),
            "profile_s": round(sum(sum((e.payload.get("costs") or {}).values()) for e in profiled), 1),
            "profiles_measured": profiler.measured - measured if profiler is not None else len(profiled),
            "profiles_reused": profiler.reused - reused if profiler is not None else 0,
            "budget": budget, "seed": seed,
            "evaluations": len(speeds), "correct": sum(1 for s in speeds if s), "best_speedup": best,
            "evals_to_95pct": reach, "seconds": round(time.perf_counter() - t0, 1), "run_id": run.store.meta.run_id}


def main() -> int:
    from loopwise.config import load_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", required=True, help="comma-separated problem specs")
    ap.add_argument("--strategies", default="mcts,greedy,random")
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kernelbench", default="third_party/KernelBench")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no new run after this many seconds")
    ap.add_argument("--profiling", default="none",
                    help="comma list of proactive, all, raw, none: what the expert learns from profiling "
                         "(each mode is one more run per strategy: the profiling ablation)")
    ap.add_argument("--profile-within", type=float, default=0.9,
                    help="profile a candidate only within this share of the best speedup (0: every one)")
    ap.add_argument("--sizes", choices=("official", "reduced"), default="official",
                    help="reduced: bench/agreement_set.py sizes for the problems it lists")
    ap.add_argument("--no-memo", action="store_true", help="judge every proposal afresh, also repeats")
    ap.add_argument("--fresh", action="store_true", help="ignore rows of earlier calls")
    ap.add_argument("--set", action="append", default=[], help="config overrides, as for the CLI")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(None, [f"kernels.kernelbench={args.kernelbench}", f"kernels.device={args.device}",
                             f"store.runs_dir={out / 'runs'}"] + args.set)
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.problem import load_problem

    mirror = Path(os.environ.get("LOOPWISE_CACHE_DIR") or ".loopwise-cache") / "bench"
    mirror.mkdir(parents=True, exist_ok=True)
    rows = [] if args.fresh else _read(mirror / "search.csv")
    done = {(r["spec"], r["strategy"], int(r["budget"]), int(r["seed"]), r.get("sizes") or "official",
             r.get("profiling") or "none") for r in rows}
    modes = [m for m in args.profiling.split(",") if m]
    t0, stopped = time.monotonic(), False
    for spec in args.problems.split(","):
        todo = [(s, m) for m in modes for s in args.strategies.split(",")
                if (spec, s, args.budget, args.seed, args.sizes, m) not in done]
        if not todo:
            continue
        if time.monotonic() - t0 > args.budget_s:
            stopped = True
            break
        target = sized(spec, args.sizes, cfg.kernels.kernelbench, out / "problems")
        problem = load_problem(target, cfg.kernels.kernelbench)
        inner = LocalJudge(problem, cfg.kernels.eval, device=cfg.kernels.device, spares=2)
        judge = inner if args.no_memo else MemoJudge(inner)
        profiler = None if args.no_memo else MemoProfiler()
        try:
            for strategy, mode in todo:
                if time.monotonic() - t0 > args.budget_s:
                    stopped = True
                    break
                row = run_one(target, strategy, args.budget, args.seed, cfg, str(out / "runs"), judge, problem, mode,
                              args.profile_within, profiler)
                row.update(spec=spec, sizes=args.sizes)
                row["distinct_judged"] = getattr(judge, "judged", "")
                rows.append(row)
                print(row, flush=True)
                _write([out, mirror], rows)
        finally:
            judge.close()
        if stopped:
            break
    if rows:
        _write([out, mirror], rows)
    if stopped:
        print(f"--budget-s {args.budget_s} reached; run again on the warm machine to resume", flush=True)
    return 0


def sized(spec: str, sizes: str, kernelbench: str, folder: Path) -> str:
    """The problem to search: ``spec`` itself, or a copy at bench/agreement_set.py's reduced sizes."""
    if sizes == "official" or not spec.startswith("kernelbench:1/"):
        return spec
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import agreement_set as aset

    from loopwise.kernels.problem import load_problem

    stem = Path(load_problem(spec, kernelbench).path).stem
    if stem not in aset.SIZES["reduced"]:
        return spec
    return str(aset.write_problem(stem, "reduced", folder))


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return [{k: _value(v) for k, v in r.items()} for r in csv.DictReader(fh)]


def _value(text: str):
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _write(dirs: list[Path], rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    for folder in dirs:
        with open(folder / "search.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    lines = ["| problem | strategy | profiling | best speedup | evaluations to 95% of it | correct / judged | "
             "profiles (s) | measured / reused | s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        best = f"{r['best_speedup']:.3f}x" if r["best_speedup"] else "-"
        lines.append(f"| {r['problem']} | {r['strategy']} | {r.get('profiling') or 'none'} | {best} | "
                     f"{r['evals_to_95pct'] or '-'} | {r['correct']} / {r['evaluations']} | "
                     f"{r.get('profiles', 0)} ({r.get('profile_s', 0)}) | "
                     f"{r.get('profiles_measured', '-')} / {r.get('profiles_reused', '-')} | {r['seconds']} |")
    for folder in dirs:
        (folder / "search.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
