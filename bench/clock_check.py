"""A problem's eager time three ways in one process, to check the judge's clock against the work:
the judge's own in-process measurement of the reference (``measure_in_process``, the protocol
every speedup uses), CUDA events around back-to-back calls, and the sum of the kernels' own times
under torch's profiler (with their names). On a GPU only.

    python3 bench/clock_check.py [--ceilings N] PROBLEM.py [PROBLEM.py ...]

``--ceilings N`` first measures the device's ceilings N times (each rate from its fastest trial, as
the judge does), to see how far apart fresh measurements are; each problem's line then gives its
dtype, its counted FLOPs and its speed-of-light floor from the first of them.

One line per problem and way; the profiler's kernels below it. The three should agree within
launch overhead; a judge time far below the profiler's kernel time means the judge is not timing
the work.
"""

from __future__ import annotations

import sys
import types

import torch


def _model_and_inputs(path: str):
    source = open(path, encoding="utf-8").read()
    module = types.ModuleType("problem")
    exec(compile(source, path, "exec"), module.__dict__)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = module.Model(*module.get_init_inputs())
        args = module.get_inputs()
    return model.eval(), args


def _judge_ms(model, args) -> dict:
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.guards import pin_fp32_flags
    from loopwise.kernels.evaluate.measure import measure_in_process

    pin_fp32_flags()  # as the judge sets them for the fp32 policy
    result = measure_in_process(model, "cuda", EvalConfig(energy=False), args, None)
    t = result.timing
    return {"kernelbench": t.kernelbench_median_ms, "gpu": t.gpu_median_ms, "launch": t.launch_median_ms}


def _events_ms(model, args, calls: int = 20) -> float:
    with torch.no_grad():
        for _ in range(3):
            model(*args)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            model(*args)
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def _profiled(model, args) -> tuple[float, list[tuple[str, float]]]:
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        model(*args)
        torch.cuda.synchronize()
    kernels = [(e.key, e.self_device_time_total / 1e3) for e in prof.key_averages() if e.self_device_time_total > 0]
    return sum(ms for _, ms in kernels), kernels


def main(paths: list[str], ceilings_runs: int = 0) -> None:
    from loopwise.kernels.problem import load_problem
    from loopwise.kernels.roofline.ceilings import measure_ceilings
    from loopwise.kernels.roofline.floor import count_work, speed_of_light

    measured = []
    for k in range(ceilings_runs):
        c = measure_ceilings("cuda")
        measured.append(c)
        print(f"ceilings {k}: copy {c.bandwidth_gbs:.0f} GB/s, fp32 {c.fp32_tflops:.1f}, tf32 {c.tf32_tflops:.1f}, "
              f"bf16 {c.bf16_tflops:.1f} TFLOP/s")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, matmul precision "
          f"{torch.get_float32_matmul_precision()}, allow_tf32 {torch.backends.cuda.matmul.allow_tf32}")
    for path in paths:
        model, args = _model_and_inputs(path)
        judge = _judge_ms(model, args)
        events = _events_ms(model, args)
        total, kernels = _profiled(model, args)
        if measured:
            work = count_work(load_problem(path))
            floor = speed_of_light(work, measured[0], "fp32", judge["kernelbench"])
            print(f"{path}: dtype {work.dtype}, {work.flops / 1e9 if work.flops else 0:.2f} GFLOP, floor "
                  f"{floor.floor_ms} ms ({floor.bound}; compute {floor.compute_ms}, memory {floor.memory_ms})"
                  f"{'; ' + floor.note if floor.note else ''}")
        print(f"{path}: judge kernelbench {judge['kernelbench']:.4f} ms, gpu {judge['gpu']:.4f}, launch "
              f"{judge['launch']:.4f}; events back to back {events:.4f} ms; profiler kernels {total:.4f} ms")
        for name, ms in kernels:
            print(f"    {ms:9.4f} ms  {name[:110]}")


if __name__ == "__main__":
    argv = sys.argv[1:]
    runs = 0
    if argv[:1] == ["--ceilings"] and len(argv) >= 2:
        runs, argv = int(argv[1]), argv[2:]
    if not argv:
        sys.exit("usage: python3 bench/clock_check.py [--ceilings N] PROBLEM.py [PROBLEM.py ...]")
    main(argv, runs)
