"""Where a candidate's time goes under the judge's clock: GPU work or host launch.

The judge (``loopwise.kernels.evaluate.timing.Clock``) queues its L2 flush just ahead of the start
event, so the host's launch of the timed call overlaps the flush; a call whose launch path takes
longer than the flush is timed with part of its host cost. This script times, per problem, eager,
torch.compile, the compiler seed (Inductor's code as a standalone ModelNew) and the seed replayed
as a CUDA graph, four ways:

- ``judge_ms``: the judge's own clock and protocol (median of the trials);
- ``queued_ms``: the same, with the GPU kept busy (``torch.cuda._sleep``) after the flush, so the
  whole call is launched before the start event can run: GPU time only, L2 still cold;
- ``launch_us``: the host time one call takes to return while the GPU is busy (its launch cost);
- ``kernels_ms``: the sum of the CUDA kernels' own durations per call (torch.profiler).

The seed is also timed with its kernels launched through Triton's compiled launcher directly
(``seed_direct``: the call ``CompiledKernel.__getitem__``'s runner makes, with the stream Inductor
passes), and the host side of its calls is profiled (``DIR/seed_host_profile.txt``, cProfile).

    python bench/launch_check.py PROBLEM.py... --out DIR [--trials 50]

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


def _direct(module) -> int:
    """Patches the seed module's launches to call each compiled kernel's launcher directly once
    it is compiled; returns how many launches it patched."""
    launches = [v for v in vars(module).values() if type(v).__name__ == "_Launch"]
    for launch in launches:
        plain = launch.run

        def run(*args, stream=None, _plain=plain, _launch=launch, **kw):
            key = tuple(a.data_ptr() % 16 == 0 if isinstance(a, torch.Tensor) else a for a in args)
            hit = _launch.compiled.get(key)
            if hit is None:
                return _plain(*args, stream=stream, **kw)
            kernel, grid = hit
            if stream is None:
                stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
            kernel.run(grid[0], grid[1], grid[2], stream, kernel.function, kernel.packed_metadata, None,
                       None, None, *args, *_launch.tail)

        launch.run = run
    return len(launches)


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
    from loopwise.kernels.evaluate.timing import Clock

    clock = Clock("cuda")
    with torch.no_grad():
        judged = clock.run(fn, trials, 3)
        plain_flush = clock.flush

        def flush_then_busy():
            plain_flush()
            torch.cuda._sleep(BUSY_CYCLES)

        clock.flush = flush_then_busy
        queued = clock.run(fn, trials, 3)
        launch = _launch_us(fn)
        kernels, launches = _kernels_ms(fn)
    return {"judge_ms": round(statistics.median(judged.event_ms), 4),
            "queued_ms": round(statistics.median(queued.event_ms), 4),
            "launch_us": round(launch, 1), "kernels_ms": round(kernels, 4), "launches": launches}


def check(problem, out: Path, trials: int) -> dict:
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
    for label, moves in (("seed", {}), ("seed_graph", {"cudagraph": 1}), ("seed_direct", {})):
        path = out / "seeds" / f"{Path(problem.name).name}_{label}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_seed(record, problem, moves))
        torch.manual_seed(42)
        module = _load(path)
        if label == "seed_direct":
            row["direct_patched"] = _direct(module)
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
    for label, module in sides.items():
        try:
            row[label] = _timings(lambda m=module: m(*inputs), trials)
        except Exception as exc:  # noqa: BLE001 - a row per side, whatever fails
            row[label] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(label, json.dumps(row[label]), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--trials", type=int, default=50)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    each_problem(args.problems, lambda problem: check(problem, out, args.trials), out / "launch_check.json")


if __name__ == "__main__":
    main()
