"""The memory engine's hierarchy check: the planner's plan for a GEMM -> ReLU ->
GEMM chain, carried out as one fused Triton kernel with shared memory and registers as the
scratchpad (loopwise/memory/gpu_chain.py), against the DRAM bytes Nsight Compute measures
(``dram__bytes_read.sum`` + ``dram__bytes_write.sum``, and ``dram__bytes.sum``); the layer-by-layer
schedule (three Triton kernels) and PyTorch eager (cuBLAS, three kernels) against the planner's
layer-by-layer prediction.

    source bench/remote_prelude.sh; python3 bench/memory_gpu_check.py    # $OUT/memory_gpu_check.{md,json}

Each variant runs once to compile and warm up, then once inside an NVTX range, under ncu with
``--cache-control all`` (caches flushed before the kernel) and ``--clock-control none``; every
kernel in the range is summed. Times (no ncu) are CUDA-event medians of 20 calls.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RANGE = "lw_memory_check"
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum", "gpu__time_duration.sum")
VARIANTS = ("fused", "unfused", "torch")


def tensors(chain, seed: int = 0):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(chain.m, chain.k, device="cuda", generator=gen).bfloat16()
    w1 = (torch.randn(chain.k, chain.n1, device="cuda", generator=gen) / chain.k ** 0.5).bfloat16()
    w2 = (torch.randn(chain.n1, chain.n2, device="cuda", generator=gen) / chain.n1 ** 0.5).bfloat16()
    return x, w1, w2


def runner(variant: str, chain, launch):
    import torch

    from loopwise.memory.gpu_chain import fused, unfused

    if variant == "fused":
        return lambda x, w1, w2: fused(x, w1, w2, launch, relu=chain.relu)
    if variant == "unfused":
        return lambda x, w1, w2: unfused(x, w1, w2, relu=chain.relu)
    return lambda x, w1, w2: (torch.relu(x @ w1) if chain.relu else x @ w1) @ w2


def child(args, chain, launch) -> int:
    """One variant, once to compile, once inside the NVTX range ncu profiles."""
    import torch

    x, w1, w2 = tensors(chain)
    run = runner(args.child, chain, launch)
    run(x, w1, w2)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(RANGE)
    run(x, w1, w2)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


def _total(launches, metric: str) -> float:
    """A metric summed over every kernel launch in the range."""
    return sum(launch.value(metric) or 0.0 for launch in launches)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=1 << 22, help="rows of X (tokens, or pixels of a 1x1 convolution)")
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--n1", type=int, default=256, help="hidden width")
    ap.add_argument("--n2", type=int, default=64)
    ap.add_argument("--no-relu", action="store_true")
    ap.add_argument("--target", default="gpu-sm-shared")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()

    from loopwise.memory.gpu_chain import Chain, launch_from_plan
    from loopwise.memory.targets import load_target

    chain = Chain(args.m, args.k, args.n1, args.n2, relu=not args.no_relu)
    target = load_target(args.target)
    t0 = time.perf_counter()
    launch = launch_from_plan(chain, target.scratchpad.bytes)
    plan_s = time.perf_counter() - t0
    if args.child:
        return child(args, chain, launch)

    import torch
    import triton

    from loopwise.kernels.profile.ncu import NcuRunError, run_ncu
    from loopwise.kernels.profile.run import find_ncu

    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    x, w1, w2 = tensors(chain)
    ref = (x.float() @ w1.float())
    ref = (ref.relu() if chain.relu else ref) @ w2.float()
    scale = ref.abs().max().item()
    rows = []
    for variant in VARIANTS:
        run = runner(variant, chain, launch)
        y = run(x, w1, w2)
        err = (y.float() - ref).abs().max().item() / scale
        del y
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            run(x, w1, w2)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        rows.append({"variant": variant, "max_err_rel": err, "ms": sorted(times)[len(times) // 2]})
    del x, w1, w2, ref
    torch.cuda.empty_cache()

    ncu = find_ncu()
    for row in rows:
        csv_path = out / f"memory_check_{row['variant']}.csv"
        argv = [sys.executable, str(Path(__file__).resolve()), "--m", str(args.m), "--k", str(args.k), "--n1",
                str(args.n1), "--n2", str(args.n2), "--target", args.target, "--child", row["variant"]]
        if args.no_relu:
            argv.append("--no-relu")
        if ncu is None:
            row["error"] = "ncu not found"
            continue
        try:
            launches, row["ncu_s"] = run_ncu(argv, csv_path, ncu=ncu, timeout=300, metrics=METRICS, nvtx_range=RANGE)
        except NcuRunError as exc:
            row["error"] = str(exc)
            continue
        row["kernels"] = [launch_.name for launch_ in launches]

        row["read"], row["write"] = _total(launches, "dram__bytes_read.sum"), _total(launches, "dram__bytes_write.sum")
        row["dram_bytes_sum"] = _total(launches, "dram__bytes.sum")
        row["measured"] = row["read"] + row["write"]
        row["ncu_ms"] = _total(launches, "gpu__time_duration.sum") * 1e3
        row["predicted"] = launch.fused_bytes if row["variant"] == "fused" else launch.layer_by_layer_bytes
        row["ratio"] = row["measured"] / row["predicted"]

    gib = 2 ** 30
    env = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()}
    lines = [f"# Memory hierarchy check ({env['date']}, {env['gpu']}, torch {env['torch']}, triton {env['triton']})", "",
             f"Chain: X {chain.m} x {chain.k} -> W1 {chain.k} x {chain.n1} -> {'ReLU -> ' if chain.relu else ''}"
             f"W2 {chain.n1} x {chain.n2}, bf16. Target {target.name} ({target.scratchpad.bytes} B). Plan "
             f"({plan_s:.2f} s): {launch.plan.groups[0].operators}, slab {launch.slab_rows} rows, kernel block_m "
             f"{launch.block_m}, block_h {launch.block_h}; predicted fused {launch.fused_bytes / gib:.4f} GiB, "
             f"layer by layer {launch.layer_by_layer_bytes / gib:.4f} GiB, compulsory "
             f"{launch.compulsory_bytes / gib:.4f} GiB.", "",
             "| variant | kernels | predicted GiB | DRAM read GiB | DRAM write GiB | measured / predicted | "
             "dram__bytes.sum GiB | ncu ms | time ms | max rel. error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | - | - | - | - | {r['error']} | - | - | {r['ms']:.3f} | {r['max_err_rel']:.2e} |")
            continue
        lines.append(f"| {r['variant']} | {len(r['kernels'])} | {r['predicted'] / gib:.4f} | {r['read'] / gib:.4f} | "
                     f"{r['write'] / gib:.4f} | {r['ratio']:.3f} | {r['dram_bytes_sum'] / gib:.4f} | "
                     f"{r['ncu_ms']:.3f} | {r['ms']:.3f} | {r['max_err_rel']:.2e} |")
    text = "\n".join(lines) + "\n"
    (out / "memory_gpu_check.md").write_text(text)
    (out / "memory_gpu_check.json").write_text(json.dumps({"env": env, "rows": rows, "plan_s": plan_s,
                                                           "block_m": launch.block_m, "slab_rows": launch.slab_rows,
                                                           "fused_bytes": launch.fused_bytes,
                                                           "layer_by_layer_bytes": launch.layer_by_layer_bytes},
                                                          indent=1))
    print(text)
    ok = all("ratio" in r and abs(r["ratio"] - 1) <= 0.10 for r in rows[:2])
    ok = ok and rows[0].get("measured", 1e30) < rows[1].get("measured", 0)
    print("check:", "PASS" if ok else "FAIL", "(fused and unfused within 10% of the plan; fused below unfused)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
