"""Runs every problem of a generated suite at full scale on a GPU: each must give outputs of its
declared shape and dtype, finite where floating; prints the eager time and the bytes each moves.

    python bench/generated_check.py --count 200 --seed 0 [--device cuda] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import time
import types

import torch

from loopwise.kernels.generate import generate_suite


def _check(problem, device: str) -> dict:
    module = types.ModuleType(problem.name)
    exec(compile(problem.source, problem.name, "exec"), module.__dict__)
    torch.manual_seed(0)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
    expected = problem.chain.out
    with torch.no_grad():
        out = model(*inputs)
        torch.cuda.synchronize() if device.startswith("cuda") else None
        start = time.perf_counter()
        for _ in range(5):
            model(*inputs)
        torch.cuda.synchronize() if device.startswith("cuda") else None
    ms = (time.perf_counter() - start) / 5 * 1e3
    moved = sum(t.numel() * t.element_size() for t in inputs) + out.numel() * out.element_size()
    ok = (tuple(out.shape) == expected.shape and str(out.dtype).removeprefix("torch.") == expected.dtype
          and (not out.is_floating_point() or bool(torch.isfinite(out).all())))
    return {"name": problem.name, "ok": ok, "eager_ms": round(ms, 3), "mb_moved": round(moved / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for problem in generate_suite(args.count, args.seed, args.scale):
        try:
            row = _check(problem, args.device)
        except Exception as error:  # noqa: BLE001 - a failing problem is a row, not the end of the check
            row = {"name": problem.name, "ok": False, "error": f"{type(error).__name__}: {str(error)[:200]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    bad = [r["name"] for r in rows if not r["ok"]]
    print(f"{len(rows) - len(bad)} of {len(rows)} problems ok on {args.device}; failing: {bad}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
