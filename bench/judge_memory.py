"""Where a judgement's memory goes: judges one candidate on a GPU while a thread samples the
device's used memory (all processes), the judge's own allocated and reserved device memory and
the host's available memory, and reports the peak of
each per judge phase and sandbox request, with the verdict.

    python3 bench/judge_memory.py PROBLEM CANDIDATE [--perf-trials N]   # writes $OUT/judge_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _host_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


class Sampler(threading.Thread):
    """Samples device-wide used memory and host available memory; ``mark`` names what runs now."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import torch

        self.torch = torch
        self.label = "start"
        self.peaks: dict[str, dict] = {}
        self.stop = False

    def mark(self, label: str) -> None:
        self.label = label

    def run(self) -> None:
        torch = self.torch
        while not self.stop:
            free, total = torch.cuda.mem_get_info()
            used, host = total - free, _host_available()
            peak = self.peaks.setdefault(self.label, {"gpu_used_gib": 0.0, "judge_allocated_gib": 0.0,
                                                      "judge_reserved_gib": 0.0, "host_available_min_gib": 1e9})
            peak["gpu_used_gib"] = max(peak["gpu_used_gib"], used / 2**30)
            peak["judge_allocated_gib"] = max(peak["judge_allocated_gib"], torch.cuda.memory_allocated() / 2**30)
            peak["judge_reserved_gib"] = max(peak["judge_reserved_gib"], torch.cuda.memory_reserved() / 2**30)
            peak["host_available_min_gib"] = min(peak["host_available_min_gib"], host / 2**30)
            time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("candidate")
    parser.add_argument("--perf-trials", type=int, default=20)
    args = parser.parse_args()
    import torch

    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate import judge as judge_mod
    from loopwise.kernels.evaluate.pool import Sandbox
    from loopwise.kernels.problem import load_problem

    torch.cuda.init()
    sampler = Sampler()
    sampler.start()
    asked = Sandbox.request

    def request(self, op, payload, timeout):
        sampler.mark(f"sandbox:{op}")
        t0 = time.time()
        try:
            return asked(self, op, payload, timeout)
        finally:
            sampler.mark("judge")
            print(f"  sandbox {op}: {time.time() - t0:.2f} s", flush=True)

    Sandbox.request = request
    # a line per sandbox request and per judge activity as it ends, so a run stopped before its
    # verdict still says where its time went
    from contextlib import contextmanager

    from loopwise.kernels.evaluate.spent import Spent

    entered = Spent.__call__
    began = time.time()

    @contextmanager
    def activity(self, name):
        t0 = time.time()
        try:
            with entered(self, name):
                yield
        finally:
            print(f"[{time.time() - began:8.1f}s] {name}: {time.time() - t0:.2f} s", flush=True)

    Spent.__call__ = activity
    cfg = EvalConfig(perf_trials=args.perf_trials)
    t0 = time.time()
    with judge_mod.LocalJudge(load_problem(args.problem), cfg, device="cuda", spares=0) as j:
        ev = j.evaluate(Path(args.candidate).read_text(), Path(args.candidate).name)
        hold, work = j.reference.hold, j.reference.work
    sampler.stop = True
    result = {"problem": args.problem, "candidate": args.candidate, "status": ev.status.value,
              "reasons": [f"{r.severity}:{r.code}: {r.message}" for r in ev.reasons], "speedup": ev.speedup,
              "phases": ev.phases, "hold": hold, "work": work, "wall_s": time.time() - t0, "peaks": sampler.peaks,
              "gpu_total_gib": torch.cuda.get_device_properties(0).total_memory / 2**30,
              "log_tail": ev.log[-3000:] if ev.log else ""}
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    name = f"judge_memory_{Path(args.problem).stem}.json"
    (out / name).write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps({k: v for k, v in result.items() if k != "log_tail"}, indent=1, default=str))
    print(result["log_tail"][-1500:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
