"""Registers and spills of the expert's Triton kernels for Hopper, without a GPU.

    python3 bench/template_spills.py [PROBLEM.py ...] [--precision fp32,relaxed] [--out DIR]

For each problem (default: KernelBench level-1 convolutions the expert writes with the conv3d,
transposed-convolution and separable templates, under third_party/KernelBench) it renders the
expert's template for every combination of its knobs in the proposer's SPACE, runs the candidate's
forward on the meta device with the kernel launch intercepted (so the real sizes cost no memory),
compiles the launched kernel ahead of time for sm_90 with the arguments it was given and reads
ptxas's report (loopwise.kernels.expert.aot): registers per thread, bytes of spill stores, the
shared memory Triton allots a block, and whether the products became wgmma. Writes
template_spills.csv and prints the table. Uses Triton's
CUDA backend only to compile (ptxas ships with Triton).
"""
from __future__ import annotations

import argparse
import csv
import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVEL1 = ROOT / "third_party/KernelBench/KernelBench/level1"
DEFAULT = ["54_", "61_", "71_", "81_", "86_"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="*")
    ap.add_argument("--precision", default="fp32,relaxed")
    ap.add_argument("--out", default="bench_out")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from loopwise.kernels.expert.aot import compile_for_hopper
    from loopwise.kernels.expert.capture import capture
    from loopwise.kernels.expert.generate import default_moves, render
    from loopwise.kernels.expert.proposer import SPACE
    from loopwise.kernels.problem import load_problem

    paths = [Path(p) for p in args.problems] or [next(LEVEL1.glob(f"{prefix}*.py")) for prefix in DEFAULT]
    rows = []
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
                row = {"problem": path.stem, "template": pattern.kind, "precision": precision, **moves,
                       "default": all(defaults.get(k) == v for k, v in moves.items()),
                       **compile_for_hopper(render(pattern, moves, precision), problem)}
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
