"""Evaluation throughput with 1 vs 2 GPUs on the same candidate set, and the
wall time of a level-1 baseline sweep with each.

The candidate set is fixed before timing: for each problem, the expert proposer's distinct
candidates (up to ``--per-problem``, from the root and its seeds 0, 1, 2, ...). For each GPU count
the script starts an executor with that many workers (``--executor local``: worker processes
pinned one per GPU; ``ray``: one actor per GPU), submits every candidate at once and times until
the last verdict (``cold``: each worker builds its judge and times the reference per problem
first), then submits the same set again (``warm``: judges built). The statuses must agree between
GPU counts (the same candidates, the same judge). Then the level-1 baseline sweep: eager and
torch.compile of every level-1 problem of bench/expert_subset.py's subset, one job per problem.

    source bench/remote_prelude.sh
    python3 bench/throughput.py --gpus 1,2 --executor local

Writes $OUT/throughput.csv (one row per GPU count and phase) and $OUT/throughput.md. Each phase
of more GPUs also gives the best speedup any schedule could reach on the jobs' own times on one
GPU (``best_speedup``): where that bound is below a target, the set holds the figure back.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

PROBLEMS = "kernelbench:1/40,kernelbench:2/1,kernelbench:2/16,kernelbench:2/71,kernelbench:2/76"


def candidates(problem, per_problem: int, precision: str) -> list[str]:
    """The expert's distinct candidates for ``problem`` (root proposals of seeds 0, 1, ...)."""
    from loopwise.core.propose import ProposalRequest
    from loopwise.kernels.expert.proposer import ExpertProposer

    found: dict[str, None] = {}
    for seed in range(4 * per_problem):
        proposer = ExpertProposer(problem, seed=seed, precision=precision)
        for r in proposer.propose(ProposalRequest(task=problem.source, candidate="", evaluation="", findings=(),
                                                  memory="", n=per_problem, kind="kernels")):
            if r.ok:
                found.setdefault(r.content, None)
        if len(found) >= per_problem:
            break
    return list(found)[:per_problem]


def best_speedup(seconds: list[float], workers: int) -> float:
    """The most ``workers`` workers could gain over one on jobs that took ``seconds`` each on one
    worker, jobs never split: their sum over the shortest makespan. For two workers that makespan is
    exact (the best split of the jobs in two, by subset sums at millisecond steps: 15 equal jobs give
    1.875x, not 2x); for more, its lower bound, the larger of an even share and the longest job. A
    measured ratio below a target on a set whose bound is itself below it says the set, not the
    executor, holds the figure back."""
    total = sum(seconds)
    if not seconds or total <= 0:
        return float("nan")
    if workers == 2:
        steps = [max(0, round(s * 1000)) for s in seconds]
        whole = sum(steps)
        reachable = 1  # bit k: some subset of the jobs sums to k milliseconds
        for step in steps:
            reachable |= reachable << step
        half = min((max(k, whole - k) for k in range(whole + 1) if reachable >> k & 1), default=whole)
        return total / (half / 1000) if half else float("nan")
    return total / max(total / workers, max(seconds))


def judge_all(dispatcher, cfg, work: list[tuple[object, str, str]]) -> tuple[float, Counter, list[str], list[float]]:
    """Submits every (problem, name, source) at once: wall seconds until the last verdict, the
    statuses counted and in order, and each job's own seconds on its worker."""
    from loopwise.kernels.evaluate.workers import ExecutorJudge

    judges = {p.name: ExecutorJudge(p, cfg.kernels.eval, dispatcher) for p, _, _ in work}
    t0 = time.perf_counter()
    futures = [dispatcher.submit(judges[p.name].job(src, name)) for p, name, src in work]
    results = [f.result() for f in futures]
    wall = time.perf_counter() - t0
    statuses = [r.result["status"] if r.ok else f"lost: {r.error[:60]}" for r in results]
    return wall, Counter(statuses), statuses, [r.seconds for r in results]


def sweep(dispatcher, cfg, problems) -> tuple[float, int]:
    from loopwise.kernels.evaluate.workers import baseline_job

    t0 = time.perf_counter()
    futures = [dispatcher.submit(baseline_job(p, cfg)) for p in problems]
    ok = sum(1 for f in futures if f.result().ok)
    return time.perf_counter() - t0, ok


def _times(value) -> str:
    return f"{value:.2f}x" if isinstance(value, float) else ""


def save(path: Path, rows: list[dict]) -> None:
    """Every row so far, rewritten after each phase: a run stopped by its time limit keeps them."""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main() -> int:
    from loopwise.config import load_config
    from loopwise.core.execute.dispatch import dispatching
    from loopwise.kernels.problem import load_problem

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1,2")
    ap.add_argument("--executor", default="local", choices=("local", "ray"))
    ap.add_argument("--problems", default=PROBLEMS)
    ap.add_argument("--per-problem", type=int, default=8)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--kernelbench", default=str(REPO / "third_party" / "KernelBench"))
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(None, [f"kernels.kernelbench={args.kernelbench}"])
    problems = [load_problem(s, args.kernelbench) for s in args.problems.split(",") if s]
    work = [(p, f"{p.name}#{i}", src) for p in problems
            for i, src in enumerate(candidates(p, args.per_problem, cfg.kernels.eval.precision))]
    print(f"{len(work)} candidates over {len(problems)} problems", flush=True)
    sweep_problems = []
    if not args.no_sweep:
        from expert_subset import SUBSET

        sweep_problems = [load_problem(f"kernelbench:1/{i}", args.kernelbench) for i in SUBSET[1]]
    rows, reference, one_gpu_seconds = [], None, {}
    for n in (int(x) for x in args.gpus.split(",")):
        # Each GPU count starts with empty compile caches (Triton, Inductor) and an empty loopwise
        # cache, so its cold phase and its sweep do not reuse what the previous count built.
        fresh = Path(tempfile.mkdtemp(prefix=f"throughput-{args.executor}-{n}gpu-"))
        for var, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                         ("LOOPWISE_CACHE_DIR", "loopwise")):
            os.environ[var] = str(fresh / sub)
        with dispatching(args.executor, str(n)) as dispatcher:  # n workers: GPUs 0 .. n-1
            for phase in ("cold", "warm"):
                wall, counts, statuses, seconds = judge_all(dispatcher, cfg, work)
                reference = reference or statuses
                if n == 1:
                    one_gpu_seconds[phase] = seconds
                bound = best_speedup(one_gpu_seconds.get(phase, []), n)
                rows.append({"executor": args.executor, "gpus": n, "phase": phase, "jobs": len(work),
                             "wall_s": round(wall, 2), "per_s": round(len(work) / wall, 3),
                             "statuses": " ".join(f"{k}:{v}" for k, v in sorted(counts.items())),
                             "same_statuses_as_first": statuses == reference,
                             "best_possible": "" if bound != bound else round(bound, 3)})
                print(rows[-1], flush=True)
                save(out / "throughput.csv", rows)
            if sweep_problems:
                wall, ok = sweep(dispatcher, cfg, sweep_problems)
                rows.append({"executor": args.executor, "gpus": n, "phase": "level-1 baseline sweep",
                             "jobs": len(sweep_problems), "wall_s": round(wall, 2),
                             "per_s": round(len(sweep_problems) / wall, 3), "statuses": f"ok:{ok}",
                             "same_statuses_as_first": "", "best_possible": ""})
                print(rows[-1], flush=True)
                save(out / "throughput.csv", rows)
    lines = ["| executor | GPUs | phase | jobs | wall s | jobs/s | speedup vs 1 GPU | best possible for these jobs | statuses |",
             "|---|---|---|---|---|---|---|---|---|"]
    one = {r["phase"]: r["per_s"] for r in rows if r["gpus"] == 1}
    for r in rows:
        ratio = r["per_s"] / one[r["phase"]] if one.get(r["phase"]) else float("nan")
        lines.append(f"| {r['executor']} | {r['gpus']} | {r['phase']} | {r['jobs']} | {r['wall_s']} | {r['per_s']} | "
                     f"{ratio:.2f}x | {_times(r['best_possible'])} | {r['statuses']} |")
    (out / "throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
