"""Where a candidate's time goes under the judge's clock: GPU work or host launch.

The judge (``loopwise.kernels.evaluate.timing.Clock``) queues its L2 flush just ahead of the start
event, so the host's launch of the timed call overlaps the flush; a call whose launch path takes
longer than the flush is timed with part of its host cost. This script times, per problem, eager,
torch.compile, the compiler seed (Inductor's code as a standalone ModelNew) and the seed replayed
as a CUDA graph, four ways:

- ``kernelbench_ms``, ``gpu_ms``, ``launch_ms``, ``steady_ms``: the judge's own measurement
  (``timing.measure``): the KernelBench protocol's event time, and from its queued pass the GPU's
  time with the call queued behind a device sleep, the host's launch time, and per trial the larger
  of the two (medians; ``uncovered``: queued trials whose launch outlasted the sleep);
- ``busy2ms_ms``: the KernelBench protocol with a fixed 2 ms GPU sleep after the flush (a
  cross-check of the queued pass's adaptive sleep);
- ``launch_us``: the host time one call takes to return while the GPU is busy (its launch cost);
- ``kernels_ms``: the sum of the CUDA kernels' own durations per call (torch.profiler).

Every side is measured ``--repeats`` times, the sides in turn, to show how each figure repeats.
The host side of the seed's calls is profiled (``DIR/seed_host_profile.txt``, cProfile).

    python bench/launch_check.py PROBLEM.py... --out DIR [--trials 50] [--repeats 3]

Writes DIR/launch_check.json after every problem (a row per problem, also on failure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from inductor_seed_check import _load, each_problem, reference  # this folder, as Python runs a script

BUSY_CYCLES = 4_000_000  # ~2 ms at the H200's clocks: longer than any launch path here


def _launch_us(fn, repeats: int = 20) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        torch.cuda._sleep(BUSY_CYCLES)
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def _kernels_ms(fn, calls: int = 10) -> tuple[float, int]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    total_us = sum(e.device_time for e in events)
    return total_us / calls / 1e3, round(len(events) / calls)


def _host_profile(fn, path: Path, calls: int = 200) -> None:
    import cProfile
    import io
    import pstats

    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    path.write_text(f"{calls} calls\n" + text.getvalue())


def _timings(fn, trials: int) -> dict:
    """The judge's own measurement (``timing.measure``: the KernelBench pass and the queued pass),
    the GPU kept busy for a fixed 2 ms instead (a cross-check of the queued pass's adaptive sleep),
    the host launch, and the profiler's kernel durations."""
    from loopwise.kernels.evaluate import timing

    clock = timing.Clock("cuda")
    with torch.no_grad():
        judged = timing.measure(clock, fn, trials, 3)
        plain_flush = clock.flush

        def flush_then_busy():
            plain_flush()
            torch.cuda._sleep(BUSY_CYCLES)

        clock.flush = flush_then_busy
        busy = clock.run(fn, trials, 3)
        launch = _launch_us(fn)
        kernels, launches = _kernels_ms(fn)
    gpu, host = statistics.median(judged["gpu_ms"]), statistics.median(judged["launch_ms"])
    steady = statistics.median(max(g, h) for g, h in zip(judged["gpu_ms"], judged["launch_ms"]))
    return {"kernelbench_ms": round(statistics.median(judged["event_ms"]), 4), "gpu_ms": round(gpu, 4),
            "launch_ms": round(host, 4), "steady_ms": round(steady, 4), "uncovered": judged["uncovered"],
            "busy2ms_ms": round(statistics.median(busy.event_ms), 4),
            "launch_us": round(launch, 1), "kernels_ms": round(kernels, 4), "launches": launches}


def check(problem, out: Path, trials: int, repeats: int) -> dict:
    from loopwise.kernels.expert.inductor.seed import inductor_record
    from loopwise.kernels.expert.inductor.standalone import render_seed

    row = {"name": problem.name}
    t0 = time.perf_counter()
    record = inductor_record(problem, "cuda")
    row["extract_s"] = round(time.perf_counter() - t0, 1)
    ref, model, inputs = reference(problem)
    with torch.no_grad():
        compiled = torch.compile(model)
        compiled(*inputs)
    sides = {"eager": model, "compile": compiled}
    for label, moves in (("seed", {}), ("seed_graph", {"cudagraph": 1})):
        path = out / "seeds" / f"{Path(problem.name).name}_{label}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_seed(record, problem, moves))
        torch.manual_seed(42)
        module = _load(path)
        sides[label] = module.ModelNew(*ref.get_init_inputs()).cuda()
        if label != "seed_graph":
            with torch.no_grad():
                got = sides[label](*inputs)
                want = model(*inputs)
            row[f"{label}_max_err"] = float((got.float() - want.float()).abs().max())
    try:
        with torch.no_grad():
            _host_profile(lambda: sides["seed"](*inputs), out / "seed_host_profile.txt")
    except Exception as exc:  # noqa: BLE001
        row["host_profile"] = f"{type(exc).__name__}: {exc}"
    for r in range(repeats):  # the sides in turn, then again: drift hits every side alike
        for label, module in sides.items():
            try:
                got = _timings(lambda m=module: m(*inputs), trials)
            except Exception as exc:  # noqa: BLE001 - a row per side, whatever fails
                got = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            row.setdefault(label, []).append(got)
            print(label, r, json.dumps(got), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=1, help="times every side is measured, in turn")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    each_problem(args.problems, lambda problem: check(problem, out, args.trials, args.repeats), out / "launch_check.json")


if __name__ == "__main__":
    main()
