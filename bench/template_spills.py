"""Registers and spills of the expert's Triton kernels for Hopper, without a GPU.

    python3 bench/template_spills.py [PROBLEM.py ...] [--precision fp32,relaxed] [--out DIR]

For each problem (default: KernelBench level-1 convolutions the expert writes with the conv3d,
transposed-convolution and separable templates, under third_party/KernelBench) it renders the
expert's template for every combination of its knobs in the proposer's SPACE, runs the candidate's
forward on the meta device with the kernel launch intercepted (so the real sizes cost no memory),
compiles the launched kernel ahead of time for sm_90 with the arguments it was given (integers
divisible by 16 specialised as a launch specialises them) and reads ptxas's report: registers per
thread, bytes of spill stores, and whether the products became wgmma. Writes template_spills.csv
and prints the table. Uses Triton's CUDA backend only to compile (ptxas ships with Triton).
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import itertools
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVEL1 = ROOT / "third_party/KernelBench/KernelBench/level1"
DEFAULT = ["54_", "61_", "71_", "81_", "86_"]


def _launch(source: str, problem, folder: Path) -> tuple:
    """(kernel, positional args, keyword args) of the one launch the candidate's forward makes,
    run on the meta device."""
    import torch
    from triton.runtime.jit import JITFunction

    path = folder / f"candidate_{abs(hash(source))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reference = problem.load_module()
    seen = []

    def run(self, *args, grid, warmup, **kwargs):
        seen.append((self, args, kwargs))

    original, JITFunction.run = JITFunction.run, run
    try:
        with torch.device("meta"):
            model = module.ModelNew(*reference.get_init_inputs())
            model(*reference.get_inputs())
    finally:
        JITFunction.run = original
    if len(seen) != 1:
        raise RuntimeError(f"expected one kernel launch, saw {len(seen)}")
    return seen[0]


def _compile(kernel, args, kwargs, folder: Path) -> dict:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    options = {"num_warps": kwargs.pop("num_warps", 4), "num_stages": kwargs.pop("num_stages", 3)}
    signature, constants, attrs = {}, {}, {}
    positional = iter(args)
    for i, param in enumerate(kernel.params):
        value = kwargs[param.name] if param.name in kwargs else next(positional)
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constants[param.name] = value
        elif isinstance(value, torch.Tensor):
            signature[param.name] = {torch.float32: "*fp32", torch.int32: "*i32", torch.int64: "*i64"}[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[param.name] = "i64" if abs(int(value)) >= 2**31 else "i32"
            if int(value) % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    compiled = triton.compile(ASTSource(kernel, signature, constants, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options=options)
    ptx = folder / "kernel.ptx"
    ptx.write_text(compiled.asm["ptx"])
    report = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name", "sm_90a", str(ptx), "-o", str(ptx.with_suffix(".cubin"))],
                            capture_output=True, text=True, check=True)
    text = report.stdout + report.stderr
    return {"registers": int(re.search(r"Used (\d+) registers", text).group(1)),
            "spill_bytes": int(re.search(r"(\d+) bytes spill stores", text).group(1)),
            "wgmma": "wgmma.mma_async" in compiled.asm["ptx"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="*")
    ap.add_argument("--precision", default="fp32,relaxed")
    ap.add_argument("--out", default="bench_out")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from loopwise.kernels.expert.capture import capture
    from loopwise.kernels.expert.generate import default_moves, render
    from loopwise.kernels.expert.proposer import SPACE
    from loopwise.kernels.problem import load_problem

    paths = [Path(p) for p in args.problems] or [next(LEVEL1.glob(f"{prefix}*.py")) for prefix in DEFAULT]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for path in paths:
            problem = load_problem(str(path))
            pattern = capture(problem)
            if pattern.kind not in SPACE:
                print(f"{path.name}: no template ({pattern.reason})", flush=True)
                continue
            defaults = default_moves(pattern)
            knobs = {k: v for k, v in SPACE[pattern.kind].items() if k in ("block", "warps", "chunk")}
            for values in itertools.product(*knobs.values()):
                moves = dict(zip(knobs, values))
                for precision in args.precision.split(","):
                    kernel, launch_args, kwargs = _launch(render(pattern, moves, precision), problem, folder)
                    row = {"problem": path.stem, "template": pattern.kind, "precision": precision, **moves,
                           "default": all(defaults.get(k) == v for k, v in moves.items()),
                           **_compile(kernel, launch_args, dict(kwargs), folder)}
                    rows.append(row)
                    print(row, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "template_spills.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["problem"])
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} row(s) -> {out / 'template_spills.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
