"""Evaluator time per candidate on the CPU: one judge, N candidates judged in a row (distinct
sources, same function), as a search feeds them. Prints each evaluation's seconds and the median
of all but the first (which pays for the reference model and the first sandbox).

    python bench/judge_overhead.py [--candidates 6] [--spawn] [--no-reuse]

--spawn starts every sandbox as a fresh interpreter (LOOPWISE_SANDBOX_START=spawn) instead of
forking it from the preloaded server; --no-reuse draws fresh inputs for every evaluation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "kernels" / "judge_cases"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", type=int, default=6)
    ap.add_argument("--spawn", action="store_true")
    ap.add_argument("--no-reuse", action="store_true")
    args = ap.parse_args(argv)
    if args.spawn:
        os.environ["LOOPWISE_SANDBOX_START"] = "spawn"
    sys.path.insert(0, str(ROOT))
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.problem import load_problem

    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=20, warmup=2, energy=False,
                     reuse_inputs=not args.no_reuse)
    problem = load_problem(str(CASES / "problem_matmul_relu.py"))
    source = (CASES / "ok_torch.py").read_text()
    seconds = []
    with LocalJudge(problem, cfg, device="cpu", log_dir=tempfile.mkdtemp(prefix="judge-overhead-"), spares=2) as judge:
        for i in range(args.candidates):
            t0 = time.perf_counter()
            ev = judge.evaluate(source + f"\n# candidate {i}\n", f"c{i}")
            seconds.append(time.perf_counter() - t0)
            if os.environ.get("JUDGE_OVERHEAD_PHASES"):
                print(i, {k: round(v, 3) for k, v in ev.phases.items() if v > 0.01}, file=sys.stderr)
            if not ev.correct:
                print(f"candidate {i}: {ev.status.value}", file=sys.stderr)
                return 1
    print("per evaluation (s):", " ".join(f"{s:.2f}" for s in seconds))
    print(f"median after the first: {statistics.median(seconds[1:]):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
