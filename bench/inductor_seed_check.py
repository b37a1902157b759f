"""The compiler-seeded root on a GPU: per problem, Inductor's record (kept as a test fixture), the
standalone ModelNew written from it, its outputs against the reference's, and its time against
eager and torch.compile (CUDA events, median of --repeats calls after warm-up; a quick look, not
the judge's protocol: the judged figures come from `loopwise kernels bench`).

    python bench/inductor_seed_check.py PROBLEM_OR_DIR... --out DIR [--generated N --every K]

Writes DIR/records/NAME.json (the records), DIR/seeds/NAME.py (the files) and DIR/check.json
(one row per problem, written after every problem).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from pathlib import Path

import torch


def _time(fn, args, repeats: int) -> float:
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _load(path: Path):
    """The file as a module (Triton reads a @jit function's source from its file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(problem):
    """The problem's module, its Model on the GPU and its inputs, each made under seed 42."""
    ref_module = problem.load_module()
    torch.manual_seed(42)
    model = ref_module.Model(*ref_module.get_init_inputs()).cuda()
    torch.manual_seed(42)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ref_module.get_inputs()]
    return ref_module, model, inputs


def each_problem(paths, check_one, out_file: Path, quiet_keys: str = "trace") -> None:
    """``check_one(problem)`` for each path: a row per problem (a failure is its row), printed and
    written to ``out_file`` after every problem."""
    from loopwise.kernels.problem import load_problem

    each_problem(paths, lambda problem: check(problem, out, args.repeats), out / "check.json")

if __name__ == "__main__":
    main()
