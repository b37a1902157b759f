"""What the compiler seed's extraction costs after the baseline has compiled the problem, with
Inductor's autotuning cache reused and with every cache off, and whether the two records agree.

Per problem, in this order: the bench's baseline job (eager and torch.compile timed in sandboxes,
as ``kernels bench`` runs it first), then the extraction reusing this machine's Inductor cache
folder, then the extraction with every cache off in a fresh folder. On a GPU only.

    python3 bench/seed_cache_check.py PROBLEM.py [PROBLEM.py ...]

One line per problem: the three wall times, the kernels of each record, and whether their
launch configurations and module sources agree.
"""

from __future__ import annotations

import sys
import time


def _configs(record) -> list[tuple]:
    return [(k.config, k.num_warps, k.num_stages) for k in record.kernels]


def main(paths: list[str]) -> None:
    from loopwise.config import load_config
    from loopwise.kernels.baseline import run_baseline
    from loopwise.kernels.expert.elementwise import Unsupported
    from loopwise.kernels.expert.inductor.seed import inductor_record
    from loopwise.kernels.problem import load_problem

    config = load_config(None)
    for path in paths:
        problem = load_problem(path)
        t0 = time.perf_counter()
        row = run_baseline(problem, config, "cuda")
        baseline_s = time.perf_counter() - t0
        records, walls = {}, {}
        for reuse in (True, False):
            t0 = time.perf_counter()
            try:
                records[reuse] = inductor_record(problem, "cuda", reuse_tuning=reuse)
            except Unsupported as exc:
                records[reuse] = f"unsupported: {exc}"
            walls[reuse] = time.perf_counter() - t0
        a, b = records[True], records[False]
        if isinstance(a, str) or isinstance(b, str):
            same = f"reuse: {a if isinstance(a, str) else 'ok'}; fresh: {b if isinstance(b, str) else 'ok'}"
        else:
            same = (f"{len(a.kernels)} / {len(b.kernels)} kernels, configs "
                    f"{'equal' if _configs(a) == _configs(b) else 'DIFFER'}, module "
                    f"{'equal' if a.module == b.module else 'differs'}")
        compile_ms = row.compile.timing.median_ms if row.compile and row.compile.timing else None
        print(f"{path}: baseline {baseline_s:.1f} s (compile {compile_ms} ms), extraction reusing "
              f"{walls[True]:.1f} s, fresh {walls[False]:.1f} s; {same}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python3 bench/seed_cache_check.py PROBLEM.py [PROBLEM.py ...]")
    main(sys.argv[1:])
