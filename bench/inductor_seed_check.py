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


def each_problem(paths, check_one, out_file: Path) -> None:
    """``check_one(problem)`` for each path: a row per problem (a failure is its row, with the
    trace), printed without the trace and written to ``out_file`` after every problem."""
    from loopwise.kernels.problem import load_problem

    rows = []
    for path in paths:
        problem = load_problem(str(path), validate=False)
        start = time.perf_counter()
        try:
            row = check_one(problem)
        except Exception as exc:  # noqa: BLE001
            row = {"name": problem.name, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}",
                   "trace": traceback.format_exc()[-1500:]}
        row["wall_s"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("trace")}), flush=True)
        out_file.write_text(json.dumps(rows, indent=1))


# The seed's forms this check can run (--variants): label -> moves.
VARIANTS = {"seed": {}, "seed_graph": {"cudagraph": 1}, "seed_gemm": {"gemm": 1}, "seed_conv": {"conv": 1},
            "seed_conv2": {"conv": 2}, "seed_conv2_t1": {"conv": 2, "gemm_tile": 1},
            "seed_conv2_t2": {"conv": 2, "gemm_tile": 2}, "seed_conv3": {"conv": 3},
            "seed_conv2_graph": {"conv": 2, "cudagraph": 1}, "seed_conv3_graph": {"conv": 3, "cudagraph": 1}}


def check(problem, out: Path, repeats: int, variants=("seed", "seed_graph", "seed_gemm")) -> dict:
    from loopwise.kernels.expert.elementwise import Unsupported
    from loopwise.kernels.expert.inductor.seed import inductor_record
    from loopwise.kernels.expert.inductor.standalone import render_seed

    row, stem = {"name": problem.name}, Path(problem.name).name
    t0 = time.perf_counter()
    try:
        record = inductor_record(problem, "cuda", cache=False)  # extract_s times a real extraction
    except Unsupported as exc:
        return {**row, "status": "unsupported", "reason": str(exc)}
    row["extract_s"] = round(time.perf_counter() - t0, 1)
    (out / "records").mkdir(parents=True, exist_ok=True)
    (out / "records" / f"{stem}.json").write_text(record.to_json())
    row["kernels"], row["extern"] = len(record.kernels), record.extern
    ref_module, model, inputs = reference(problem)
    with torch.no_grad():
        expected = model(*inputs)
        row["eager_ms"] = round(_time(model, inputs, repeats), 4)
        compiled = torch.compile(model)
        compiled(*inputs)
        row["compile_ms"] = round(_time(compiled, inputs, repeats), 4)
    for label, moves in ((v, VARIANTS[v]) for v in variants):
        try:
            source = render_seed(record, problem, moves)
        except Unsupported as exc:
            row[f"{label}_status"] = f"unsupported: {exc}"
            continue
        (out / "seeds").mkdir(parents=True, exist_ok=True)
        path = out / "seeds" / f"{stem}_{label}.py"
        path.write_text(source)
        try:
            module = _load(path)  # standalone, as the judge loads it
            torch.manual_seed(42)
            new = module.ModelNew(*ref_module.get_init_inputs()).cuda()
            with torch.no_grad():
                got = new(*inputs)
                tol = 1e-4 if expected.dtype == torch.float32 else 2e-2
                ok = torch.allclose(got.float(), expected.float(), atol=tol, rtol=tol)
                row[f"{label}_correct"] = bool(ok)
                row[f"{label}_max_err"] = float((got.float() - expected.float()).abs().max())
                row[f"{label}_ms"] = round(_time(new, inputs, repeats), 4)
        except Exception as exc:  # noqa: BLE001 - a row per problem, whatever fails
            row[f"{label}_status"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            row[f"{label}_trace"] = traceback.format_exc()[-1500:]
    return {**row, "status": "done"}


def main() -> None:
    from loopwise.kernels.evaluate.guards import pin_fp32_flags
    from loopwise.kernels.generate import generate_suite

    pin_fp32_flags()  # the judge's fp32 policy: no TF32 in eager's or compile's cuBLAS / cuDNN calls either

    parser = argparse.ArgumentParser()
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--out", required=True)
    parser.add_argument("--generated", type=int, default=0, help="also the generated suite of seed 0, this many")
    parser.add_argument("--every", type=int, default=1, help="of the generated suite, every K-th problem")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--variants", default="seed,seed_graph,seed_gemm",
                        help=f"the seed's forms to check, comma-separated, of: {', '.join(VARIANTS)}")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    from loopwise.kernels.backends import prepare_environment

    prepare_environment({}, "cuda")  # as the judge's sandbox: CUTLASS's headers and flags for load_inline
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for item in args.problems:
        p = Path(item)
        paths += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    if args.generated:
        gen = out / "generated"
        for problem in generate_suite(args.generated, 0)[::args.every]:
            path = gen / f"{problem.name}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(problem.source)
            paths.append(path)
    each_problem(paths, lambda problem: check(problem, out, args.repeats, variants), out / "check.json")


if __name__ == "__main__":
    main()
