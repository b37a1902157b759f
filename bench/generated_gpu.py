"""Every template variant of every problem of a generated suite, judged on the GPU for correctness:
each variant with its default moves (what the expert proposes first from the reference), by the
judge with the problem's own policy and tolerance. A variant that is wrong, fails to compile or
crashes on the GPU is a bug in the expert (CPU checks run Triton's interpreter, whose numerics and
limits differ).

Problems are judged in ``--workers`` processes at once on the one GPU, so the speedups in the rows
are contended and say nothing about speed (they are kept only to spot a variant that is far slower
than eager); time with `loopwise kernels bench` for that.

    python3 bench/generated_gpu.py --count 200 --seed 0 --workers 8 --budget-s 500 [--out DIR]

Rows go to DIR/generated_gpu.jsonl as problems finish (one row per variant, or one row saying
the problem has no template); a later call with the same file skips the problems already in it.
DIR/generated_gpu.md has the tally.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path


def judge_problem(path: str, precision: str, tolerance: str, perf_trials: int, device: str) -> list[dict]:
    """One row per template variant of the problem at ``path`` (its status, reasons, times)."""
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.expert.generate import variants
    from loopwise.kernels.expert.proposer import ExpertProposer
    from loopwise.kernels.problem import load_problem

    name = Path(path).stem
    start = time.perf_counter()
    try:
        problem = load_problem(path)
        proposer = ExpertProposer(problem, precision=precision)
        kinds = variants(proposer.pattern, precision)
    except Exception as error:  # noqa: BLE001 - a problem that fails to load is a row
        return [{"name": name, "variant": "", "status": "load_error", "detail": f"{type(error).__name__}: {error}"[:300]}]
    if not kinds:
        return [{"name": name, "variant": "", "status": "no_template", "detail": proposer.pattern.reason[:300]}]
    config = EvalConfig(precision=precision, tolerance=tolerance, correct_trials=3, stress_trials=1,
                        perf_trials=perf_trials, warmup=2)
    rows = []
    with LocalJudge(problem, config, device=device) as judge:
        for kind in kinds:
            row = {"name": name, "variant": kind}
            try:
                source = proposer._render(proposer._defaults(kind))
            except Exception as error:  # noqa: BLE001 - a variant that does not render is a row
                rows.append({**row, "status": "render_error", "detail": f"{type(error).__name__}: {error}"[:300]})
                continue
            try:
                ev = judge.evaluate(source, name=f"{name}:{kind}")
            except Exception as error:  # noqa: BLE001 - the judge itself failing is a row too
                rows.append({**row, "status": "judge_error",
                             "detail": "".join(traceback.format_exception_only(error))[-300:]})
                continue
            rejects = [r for r in ev.reasons if str(getattr(r.severity, "value", r.severity)) == "reject"] or ev.reasons
            reasons = "; ".join(f"{r.code}: {r.message}"[:160] for r in rejects[:3])
            rows.append({**row, "status": str(ev.status.value if hasattr(ev.status, "value") else ev.status),
                         "correct": ev.correct, "trials_passed": bool(ev.trials) and all(t.passed for t in ev.trials),
                         "speedup_contended": ev.speedup, "compile_s": ev.compile_s,
                         "detail": "" if ev.correct else reasons[:400]})
    for r in rows:
        r["seconds"] = round(time.perf_counter() - start, 1)
    return rows


def _tally(rows: list[dict]) -> str:
    problems = {r["name"] for r in rows}
    judged = [r for r in rows if r["variant"] and r["status"] not in ("render_error",)]
    wrong = [r for r in rows if r["variant"] and not r.get("correct")]
    covered = {r["name"] for r in rows if r["variant"]}
    good = {r["name"] for r in rows if r.get("correct")}
    lines = [f"problems: {len(problems)}; with a template: {len(covered)}; with a correct variant on the GPU: {len(good)}",
             f"variants judged: {len(judged)}; correct: {sum(1 for r in judged if r.get('correct'))}; "
             f"not correct: {len(wrong)}",
             "statuses: " + ", ".join(f"{k} {n}" for k, n in Counter(r["status"] for r in rows).most_common()), ""]
    if wrong:
        lines += ["| problem | variant | status | detail |", "|---|---|---|---|"]
        lines += [f"| {r['name']} | {r['variant']} | {r['status']} | {r.get('detail', '')[:200].replace('|', '/')} |"
                  for r in wrong]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--folder", default="", help="problems already written (default: generate them)")
    ap.add_argument("--only", default="", help="comma-separated problem names (file stems) to judge")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "relaxed"))
    ap.add_argument("--tolerance", default="strict", choices=("strict", "legacy"))
    ap.add_argument("--scale", type=float, default=1.0, help="problem sizes (1: the suite's own)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--perf-trials", type=int, default=5)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=500.0, help="submit no new problem after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench_out")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "generated_gpu.jsonl"
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()] if rows_path.exists() else []
    done = {r["name"] for r in rows}
    folder = args.folder
    if not folder:
        from loopwise.kernels.generate import write_suite

        folder = tempfile.mkdtemp(prefix="gen-")
        write_suite(folder, args.count, args.seed, args.scale)
    paths = sorted(Path(folder).rglob("*.py"), key=lambda p: p.name)
    wanted = set(filter(None, args.only.split(",")))
    todo = [p for p in paths if p.stem not in done and (not wanted or p.stem in wanted)]
    print(f"{len(paths)} problems, {len(done)} done before, {len(todo)} to judge on {args.workers} workers", flush=True)
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool, \
            rows_path.open("a", encoding="utf-8") as sink:
        pending = {}
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < args.workers and time.perf_counter() - start < args.budget_s:
                path = queue.pop(0)
                pending[pool.submit(judge_problem, str(path), args.precision, args.tolerance, args.perf_trials, args.device)] = path
            if not pending:
                break
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                path = pending.pop(future)
                try:
                    got = future.result()
                except Exception as error:  # noqa: BLE001 - a worker that died is a row
                    got = [{"name": path.stem, "variant": "?", "status": "worker_error", "detail": repr(error)[:300]}]
                for r in got:
                    sink.write(json.dumps(r) + "\n")
                    print(json.dumps(r), flush=True)
                sink.flush()
                rows.extend(got)
        left = len(queue)
    tally = _tally(rows)
    (out / "generated_gpu.md").write_text(tally, encoding="utf-8")
    print(tally + (f"{left} problems not started (budget)\n" if left else ""), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
