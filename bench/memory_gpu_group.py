"""The memory engine's hierarchy check on a real model: one fused group of a plan that
``loopwise memory plan`` emitted, carried out on the GPU from the plan's schedule
(loopwise/memory/gpu_block.py: the MLP block, one Triton kernel, one program per slab), against
the DRAM bytes Nsight Compute measures; the same operators one PyTorch call each against the
plan's layer-by-layer figure for them.

    loopwise memory plan zoo:convnext_t --batch 32 --target gpu-sm-shared --out PLAN.json   # anywhere
    source bench/remote_prelude.sh; python3 bench/memory_gpu_group.py --plan PLAN.json --batch 32
    # $OUT/memory_gpu_group.{md,json}

Before measuring, the plan is replayed by ``loopwise.memory.verify`` (a plan that fails is not
measured). Under ncu (``--replay-mode application --cache-control none --clock-control none``)
each variant runs once to compile and warm up, then inside an NVTX range: a read-only kernel over
a 512 MiB buffer (it evicts the L2, so the variant reads from DRAM), the variant, and the same
read-only kernel again, which evicts what the variant left dirty in the L2: its DRAM writes are
the variant's write-backs and count for it. The first flush's writes are data dirty from before
and count for nothing. Times (no ncu) are CUDA-event medians of 20 calls.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RANGE = "lw_memory_group"
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")
VARIANTS = ("fused", "torch")
FLUSH_BYTES = 512 << 20


def _flush_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def l2_flush(buf_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        s = tl.sum(tl.load(buf_ptr + offs, mask=offs < n, other=0.0), axis=0)
        tl.store(out_ptr, s, mask=s == -1.0)  # the buffer is zeros: reads only, no write

    return l2_flush


def child(args) -> int:
    """One variant inside the NVTX range, between two L2 evictions."""
    import torch

    from loopwise.memory.gpu_block import Block, fused, layer_by_layer, make_tensors

    spec = json.loads(Path(args.spec).read_text())
    block = Block.from_json(spec["block"])
    tensors = make_tensors(block, "cuda", torch.bfloat16)
    run = (lambda: fused(block, tensors, spec["eps"])) if args.child == "fused" else \
        (lambda: layer_by_layer(block, tensors, spec["eps"]))
    buf = torch.zeros(FLUSH_BYTES // 4, device="cuda")
    sink = torch.zeros(1, device="cuda")
    flush = _flush_kernel()

    def evict():
        flush[(buf.numel() // 4096,)](buf, sink, buf.numel(), BLOCK=4096)

    run()
    evict()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(RANGE)
    evict()
    run()
    evict()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


def ln_eps(spec: str, batch: int, weight: str) -> float:
    """The epsilon of the model's layer norm whose weight the plan names ``weight``."""
    import torch.nn as nn

    from loopwise.errors import UserError
    from loopwise.memory.zoo import build

    module = build(spec, batch)[0]
    for name, sub in module.named_modules():
        if isinstance(sub, nn.LayerNorm) and "p_" + f"{name}.weight".replace(".", "_") == weight:
            return float(sub.eps)
    raise UserError(f"{spec}: no layer norm whose weight is {weight}")


def prepare(args):
    """The plan, checked by the replay; the group's block; the layer norm's epsilon."""
    from loopwise.errors import UserError
    from loopwise.memory.gpu_block import block_from_plan
    from loopwise.memory.torch_import import load_torch
    from loopwise.memory.verify import describe, load_plan, verify

    plan = load_plan(Path(args.plan))
    verdict = verify(plan)
    if not verdict.ok:
        raise UserError("the plan fails the replay: " + "; ".join(describe(verdict, 3)))
    spec = args.model or plan["model"]
    graph = load_torch(spec, batch=args.batch).graph
    block = block_from_plan(plan, graph, args.group)
    return plan, spec, block, ln_eps(spec, args.batch, block.ln_weight)


def measure(args, block, eps, out: Path) -> list[dict]:
    """Errors against float64 and CUDA-event times; then each variant's DRAM bytes under ncu."""
    import torch

    from loopwise.errors import UserError
    from loopwise.kernels.profile.ncu import NcuRunError, run_ncu
    from loopwise.kernels.profile.run import find_ncu
    from loopwise.memory.gpu_block import dram_bytes, fused, layer_by_layer, make_tensors

    tensors = make_tensors(block, "cuda", torch.bfloat16)
    ref = layer_by_layer(block, tensors, eps, dtype=torch.float64)
    scale = ref.abs().max().item()
    runs = {"fused": lambda: fused(block, tensors, eps), "torch": lambda: layer_by_layer(block, tensors, eps)}
    rows = []
    for variant in VARIANTS:
        err = (runs[variant]().double() - ref).abs().max().item() / scale
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            runs[variant]()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        rows.append({"variant": variant, "max_err_rel": err, "ms": sorted(times)[len(times) // 2],
                     "predicted": block.planned_bytes if variant == "fused" else block.layer_by_layer_bytes})
    del tensors, ref
    torch.cuda.empty_cache()
    spec_path = out / "memory_gpu_group_spec.json"
    spec_path.write_text(json.dumps({"block": dataclasses.asdict(block), "eps": eps}))
    ncu = find_ncu()
    for row in rows:
        if ncu is None:
            row["error"] = "ncu not found"
            continue
        csv_path = out / f"memory_group_{row['variant']}.csv"
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", row["variant"], "--spec", str(spec_path)]
        try:
            launches, row["ncu_s"] = run_ncu(argv, csv_path, ncu=ncu, timeout=400, metrics=METRICS, nvtx_range=RANGE,
                                             replay_mode="application", cache_control="none")
            row.update(dram_bytes(launches))
        except (NcuRunError, UserError) as exc:
            row["error"] = str(exc)
            continue
        row["ratio"] = row["measured"] / row["predicted"] if row["predicted"] else None
    return rows


def report(args, plan, spec, block, eps, rows, out: Path) -> bool:
    import torch
    import triton

    mb = 1e6
    env = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()}
    grp = plan["schedule"]["groups"][block.group]
    lines = [f"# Memory hierarchy check on a model ({env['date']}, {env['gpu']}, torch {env['torch']}, "
             f"triton {env['triton']})", "",
             f"{spec} at batch {args.batch}, target {plan['target']}; plan {args.plan} (replayed: pass). Group "
             f"{block.group}: {', '.join(block.operators)}; {block.slabs} slabs of {block.slab_tokens} tokens "
             f"(tiles {block.token_tiles} of {block.token_extents}), {block.channels} -> {block.hidden} -> "
             f"{block.out_channels} channels, weights resident; layer norm eps {eps:g}. Planned DRAM bytes "
             f"(the group's DMA transfers): {block.planned_bytes / mb:.3f} MB (group traffic "
             f"{grp['traffic_bytes'] / mb:.3f} MB); layer by layer: {(block.layer_by_layer_bytes or 0) / mb:.3f} MB.", "",
             "| variant | kernels | predicted MB | DRAM read MB | DRAM write MB (in kernels + written back after) | "
             "measured / predicted | ncu ms | time ms | max rel. error vs float64 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | - | {r['predicted'] / mb:.3f} | - | - | {r['error']} | - | "
                         f"{r['ms']:.3f} | {r['max_err_rel']:.2e} |")
            continue
        lines.append(f"| {r['variant']} | {len(r['kernels'])} | {r['predicted'] / mb:.3f} | {r['read'] / mb:.3f} | "
                     f"{r['write'] / mb:.3f} ({r['write_in_kernels'] / mb:.3f} + {r['write_back_after'] / mb:.3f}) | "
                     f"{r['ratio']:.3f} | {r['ncu_ms']:.3f} | {r['ms']:.3f} | {r['max_err_rel']:.2e} |")
    fused_row = rows[0]
    ok = "ratio" in fused_row and abs(fused_row["ratio"] - 1) <= 0.10 and fused_row["max_err_rel"] < 2e-2
    lines += ["", f"check: {'PASS' if ok else 'FAIL'} (the fused group's DRAM bytes within 10% of the plan's; "
                  "its output within 2e-2 of float64)"]
    text = "\n".join(lines) + "\n"
    (out / "memory_gpu_group.md").write_text(text)
    (out / "memory_gpu_group.json").write_text(json.dumps({"env": env, "plan": args.plan, "model": spec,
                                                           "batch": args.batch, "eps": eps,
                                                           "block": dataclasses.asdict(block), "rows": rows},
                                                          indent=1))
    print(text)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", help="a plan JSON written by `loopwise memory plan ... --out`")
    ap.add_argument("--model", help="the model the plan is for (default: the plan's own)")
    ap.add_argument("--batch", type=int, default=1, help="the batch the plan was made at")
    ap.add_argument("--group", type=int, help="the group to run (default: the first MLP block)")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    from loopwise.errors import UserError

    if not args.plan:
        ap.error("--plan is required")
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    from loopwise.memory.verify import PlanFormatError

    try:
        plan, spec, block, eps = prepare(args)
    except (UserError, PlanFormatError) as exc:
        print(f"memory_gpu_group: {exc}", file=sys.stderr)
        return 2
    rows = measure(args, block, eps, out)
    return 0 if report(args, plan, spec, block, eps, rows, out) else 1


if __name__ == "__main__":
    sys.exit(main())
