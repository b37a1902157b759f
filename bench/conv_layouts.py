"""The implicit-GEMM convolution template (conv2d.py.j2) read NCHW and NHWC, side by side on one GPU.

    python3 bench/conv_layouts.py [--problem third_party/KernelBench/KernelBench/level1/55_...py]
        [--batch 2] [--out DIR] [--variants fp32:nchw:128:32:8,fp32:nhwc:128:32:8]

For each layout x tile x precision it renders the template for the problem's convolution (batch
made smaller with --batch so the table takes a minute), times the forward with CUDA events (median
of 20 after warm-up) next to eager cuDNN in fp32 and in TF32, and reads the compiled Triton IR
from a private cache folder: which MMA the dot became (Hopper's warp-group wgmma or mma.sync),
how many software-pipeline stages, and the width of the global-to-shared copies. Each variant runs
in its own process (its own Triton cache folder). Writes conv_layouts.csv and .md under --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "third_party/KernelBench/KernelBench/level1/55_conv_standard_2D__asymmetric_input__square_kernel.py"
VARIANTS = [  # layout, block, chunk, warps
    ("nchw", 64, 32, 4), ("nhwc", 64, 32, 4), ("nchw", 128, 32, 8), ("nhwc", 128, 32, 8),
    ("nhwc", 128, 64, 8), ("nhwc", 64, 64, 4),
]


def _one(problem: str, batch: int, layout: str, block: int, chunk: int, warps: int, precision: str) -> dict:
    import torch

    from loopwise.kernels.evaluate.sandbox import _import_candidate
    from loopwise.kernels.expert.capture import capture
    from loopwise.kernels.expert.generate import render
    from loopwise.kernels.problem import load_problem

    source = Path(problem).read_text()
    source = re.sub(r"^batch_size\s*=.*$", f"batch_size = {batch}", source, flags=re.M)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    prob = load_problem(f.name)
    moves = {"block": block, "chunk": chunk, "warps": warps, "nhwc": int(layout == "nhwc")}
    code = render(capture(prob), moves, precision=precision)
    candidate = _import_candidate(code, tempfile.mkdtemp())
    module = prob.load_module()
    torch.manual_seed(0)
    ref = module.Model(*module.get_init_inputs()).cuda()
    torch.manual_seed(0)
    new = candidate.ModelNew(*module.get_init_inputs()).cuda()
    x = module.get_inputs()[0].cuda()

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return sorted(times)[len(times) // 2]

    with torch.no_grad():
        torch.backends.cudnn.allow_tf32 = False
        want = ref.double()(x.double()).float()
        ref.float()
        got = new(x)
        err = ((got - want).norm() / want.norm()).item()
        ours = timed(lambda: new(x))
        eager = timed(lambda: ref(x))
        torch.backends.cudnn.allow_tf32 = True
        eager_tf32 = timed(lambda: ref(x))
    return {"ms": ours, "eager_ms": eager, "eager_tf32_ms": eager_tf32, "rel_err": err}


def _ir(cache: Path) -> dict:
    ttgir = "\n".join(p.read_text() for p in cache.rglob("*.ttgir"))
    ptx = "\n".join(p.read_text() for p in cache.rglob("*.ptx"))
    meta = {}
    for path in cache.rglob("*.json"):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("name") == "conv2d_kernel":
            meta = data
    return {"wgmma": ttgir.count("warp_group_dot"), "mma_sync": ptx.count("mma.sync"),
            "wgmma_ptx": ptx.count("wgmma.mma_async"), "cp_async_16": len(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^]]*\], \[[^]]*\], 0x10,", ptx)),
            "cp_async_4": len(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^]]*\], \[[^]]*\], 0x4,", ptx)),
            "local_alloc": ttgir.count("ttg.local_alloc"), "stages": meta.get("num_stages"),
            "shared_bytes": meta.get("shared")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default=str(DEFAULT))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--variants", help="only these, comma-separated PRECISION:LAYOUT:BLOCK:CHUNK:WARPS "
                    "(e.g. fp32:nchw:128:32:8,fp32:nhwc:128:32:8, for a profiler run)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    chosen = [(p, (layout, int(b), int(c), int(w))) for p, layout, b, c, w in
              (v.split(":") for v in args.variants.split(","))] if args.variants else \
        [(p, v) for p in ("fp32", "relaxed") for v in VARIANTS]
    if args.one:
        print(json.dumps(_one(args.problem, args.batch, *json.loads(args.one))))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for precision, (layout, block, chunk, warps) in chosen:
        cache = out / "triton" / f"{precision}-{layout}-{block}-{chunk}-{warps}"
        env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
        spec = json.dumps([layout, block, chunk, warps, precision])
        proc = subprocess.run([sys.executable, __file__, "--problem", args.problem, "--batch", str(args.batch),
                               "--one", spec], env=env, capture_output=True, text=True, timeout=300)
        row = {"precision": precision, "layout": layout, "block": block, "chunk": chunk, "warps": warps}
        if proc.returncode:
            row["error"] = proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else f"rc {proc.returncode}"
        else:
            row |= json.loads(proc.stdout.strip().splitlines()[-1])
        row |= _ir(cache)
        rows.append(row)
        print(row, flush=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "conv_layouts.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    with open(out / "conv_layouts.md", "w") as f:
        f.write("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys) + "\n")
        for r in rows:
            f.write("| " + " | ".join(f"{r.get(k, ''):.4g}" if isinstance(r.get(k), float) else str(r.get(k, ""))
                                      for k in keys) + " |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
