"""Where a candidate's timed milliseconds come from: the same candidate timed by KernelBench's loop,
by our clock in this process, and by the judge (its sandbox), in turns, several rounds.

    python3 bench/diag_timing.py [--stems 22_Tanh,30_Softsign] [--rounds 3] [--ways kb,clock,judge,...]

Written after the 2026-11-30 agreement run, where our candidate times (mean of 100 CUDA-event
trials) were up to 40% above KernelBench's on memory-bound Triton kernels while the reference
times agreed within 3% and both minima matched: the timed window sometimes waits for the host.
Prints one row per (stem, round, way) with min / median / mean / max ms and the host window.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def row(stem: str, rnd: int, way: str, event_ms: list[float], host_ms: list[float] | None = None) -> str:
    host = f"{statistics.median(host_ms):8.4f}" if host_ms else "       -"
    return (f"{stem:14s} {rnd:2d} {way:16s} {min(event_ms):8.4f} {statistics.median(event_ms):8.4f} "
            f"{statistics.fmean(event_ms):8.4f} {max(event_ms):8.4f} {host}")


def kb_times(model, args, trials: int) -> list[float]:
    from kernelbench_agreement import install_llm_client_shims

    install_llm_client_shims()  # kernelbench/__init__ imports its LLM helpers' clients
    sys.path.insert(0, str(ROOT / "third_party" / "KernelBench" / "src"))
    from kernelbench.timing import time_execution_with_cuda_event  # type: ignore[import-not-found]

    import torch

    with torch.no_grad():
        return time_execution_with_cuda_event(model, args, num_warmup=3, num_trials=trials, verbose=False,
                                              device=torch.device("cuda:0"))


def load_candidate(path: Path, problem_path: Path):
    """ModelNew and inputs in this process (Triton needs the kernel's source in a file)."""
    import importlib.util

    import torch

    from loopwise.kernels.problem import load_problem

    spec = importlib.util.spec_from_file_location(f"diag_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prob = load_problem(str(problem_path)).load_module()
    torch.manual_seed(0)
    model = module.ModelNew(*prob.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()]
    return model, inputs


WAYS = ("kb", "clock", "judge", "judge0", "kb_beside_pool", "session")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stems", default="22_Tanh,30_Softsign")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--ways", default="kb,clock,judge,judge0,kb_beside_pool",
                    help=f"comma list of {', '.join(WAYS)} (session: the sandbox's code in this process; "
                         "it patches Triton's launcher here, so give it its own run)")
    args = ap.parse_args(argv)
    ways = args.ways.split(",")

    import torch

    import agreement_set as aset
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate import timing
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.evaluate.pool import SandboxPool, start_method
    from loopwise.kernels.problem import load_problem

    print(f"sandbox start: {start_method()}  affinity: {len(os.sched_getaffinity(0))} cores  ways: {ways}", flush=True)
    print(f"{'stem':14s} rd {'way':16s} {'min':>8s} {'median':>8s} {'mean':>8s} {'max':>8s} {'host med':>8s}")
    cfg = EvalConfig(correct_trials=5, perf_trials=args.trials, statistic="mean", energy=False,
                     compile_timeout_s=120, run_timeout_s=60)
    settings = {"gpu_memory_fraction": cfg.gpu_memory_fraction, "host_memory_gb": cfg.host_memory_gb}
    pools = {"judge": SandboxPool("cuda:0", settings, spares=2) if {"judge", "kb_beside_pool"} & set(ways) else None,
             "judge0": SandboxPool("cuda:0", settings, spares=0) if "judge0" in ways else None}
    work = Path(tempfile.mkdtemp(prefix="diag-timing-"))
    try:
        for stem in args.stems.split(","):
            problem_path = aset.write_problem(stem, "reduced", work)
            cand_path = aset.candidate_path(stem, "correct")
            source = cand_path.read_text()
            judges = {k: LocalJudge(load_problem(str(problem_path)), cfg, device="cuda:0", pool=p)
                      for k, p in pools.items() if p is not None and k in ways}
            model = inputs = clock = session = None
            if {"kb", "clock", "kb_beside_pool"} & set(ways):
                model, inputs = load_candidate(cand_path, problem_path)
                clock = timing.Clock("cuda:0")
            if "session" in ways:
                from loopwise.kernels.evaluate.sandbox import Session

                session = Session("cuda:0", settings)
                session.load({"kind": "candidate", "problem_source": problem_path.read_text(),
                              "candidate_source": source, "extensions_dir": str(work / "ext"), "backend_hints": {}})
                prob = load_problem(str(problem_path)).load_module()
                sets = []
                for seed in (1, 2):
                    torch.manual_seed(seed)
                    sets.append([x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()])
                session.stage({"sets": sets})
            for rnd in range(args.rounds):
                for way in ways:
                    if way in ("kb", "kb_beside_pool"):
                        if way == "kb_beside_pool":
                            pools["judge"].wait_spares()
                        t = kb_times(model, inputs, args.trials)
                        print(row(stem, rnd, way, t), flush=True)
                    elif way == "clock":
                        def call():
                            with torch.no_grad():
                                return model(*inputs)

                        s = clock.run(call, args.trials, 3)
                        print(row(stem, rnd, "our_clock", s.event_ms, s.host_ms), flush=True)
                    elif way == "session":
                        r = session.time({"trials": args.trials, "warmup": cfg.warmup, "keep": [],
                                          "device_outputs": True})
                        print(row(stem, rnd, "session", r["event_ms"], r["host_ms"]), flush=True)
                    else:
                        t0 = time.perf_counter()
                        ev = judges[way].evaluate(source + f"\n# round {rnd}\n", f"{stem}-{way}-{rnd}")
                        tm = ev.timing
                        if tm is None:
                            print(f"{stem} {rnd} {way}: {ev.status.value} {[r.code for r in ev.reasons]}", flush=True)
                            continue
                        print(f"{stem:14s} {rnd:2d} {way + '_' + start_method()[:4]:16s} {tm.min_ms:8.4f} "
                              f"{tm.median_ms:8.4f} {tm.mean_ms:8.4f} {tm.max_ms:8.4f} {tm.host_median_ms:8.4f}  "
                              f"ref mean {ev.reference_timing.mean_ms:.4f}  ({time.perf_counter() - t0:.1f} s)",
                              flush=True)
    finally:
        for p in pools.values():
            if p is not None:
                p.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
