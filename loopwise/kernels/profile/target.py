"""The process a profiler watches: one problem's model (the candidate's ``ModelNew`` or the
reference ``Model``) built, warmed up and called once inside an NVTX range.

    python -m loopwise.kernels.profile.target --problem P.py [--candidate C.py] --device cuda \
        --out DIR [--trace] [--warmup 2]

It is started by :mod:`loopwise.kernels.profile.run` twice: plainly (with ``--trace``: a
torch.profiler trace of the profiled call, and Triton's cache folder pointed at ``DIR/triton`` so
the cubins of every kernel it compiled can be disassembled), and under Nsight Compute, which
profiles only the kernels launched inside the range :data:`NVTX_RANGE` (warm-up, input generation
and Triton's compilation stay out). It writes ``DIR/manifest.json``; on a failure it writes the
error there and exits with status 2, so the caller can tell the user what went wrong in one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from loopwise.core.files import write_atomic

NVTX_RANGE = "loopwise_profile"
SEED = 1234


def _write(out: Path, manifest: dict) -> None:
    write_atomic(out / "manifest.json", json.dumps(manifest, indent=1))


def _extensions(before: set[str]) -> list[str]:
    """Shared objects of C++/CUDA extensions the candidate built and loaded (load_inline / load):
    those under torch's extension build folder. torch imports an extension without entering it in
    ``sys.modules``, so the process's memory map is read first; modules loaded since ``before``
    are the fallback where there is no ``/proc``."""
    try:
        from torch.utils.cpp_extension import get_default_build_root

        roots = [os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()]
    except ImportError:
        return []
    found = loaded_shared_objects(roots)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if name not in before and path.endswith(".so") and _under(path, roots):
            found.append(str(Path(path).resolve()))
    return sorted(set(found))


def loaded_shared_objects(roots: list[str], maps: Path = Path("/proc/self/maps")) -> list[str]:
    """Shared objects mapped into this process whose file lies under one of ``roots``."""
    try:
        lines = maps.read_text(errors="replace").splitlines()
    except OSError:
        return []
    paths = {line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6}
    return sorted(str(Path(p).resolve()) for p in paths if ".so" in Path(p).name and _under(p, roots))


def _under(path: str, roots: list[str]) -> bool:
    resolved = str(Path(path).resolve())
    return any(resolved.startswith(str(Path(r).resolve()) + os.sep) for r in roots if r)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    manifest: dict = {"problem": args.problem, "candidate": args.candidate, "device": args.device,
                      "nvtx_range": NVTX_RANGE, "ok": False}
    try:
        import torch

        from loopwise.kernels.evaluate import inputs
        from loopwise.kernels.evaluate.guards import pin_fp32_flags
        from loopwise.kernels.evaluate.sandbox import _exec_problem, _import_candidate

        pin_fp32_flags()
        if args.device.startswith("cuda"):
            from loopwise.kernels.backends import link_pytorchs_libdevice

            link_pytorchs_libdevice()  # the libdevice the judge's sandbox links: the kernels judged, profiled
        problem = _exec_problem(Path(args.problem).read_text(encoding="utf-8"), strip_models=False)
        loaded_before = set(sys.modules)
        if args.candidate:
            work = out / "candidate"
            work.mkdir(parents=True, exist_ok=True)
            module = _import_candidate(Path(args.candidate).read_text(encoding="utf-8"), str(work))
            cls = getattr(module, "ModelNew", None)
            if cls is None:
                raise SystemExit("the candidate defines no ModelNew")
        else:
            cls = problem.Model
        model = inputs.build_model(cls, inputs.init_inputs(problem, args.device), args.device)
        args_in = inputs.draw_inputs(problem, SEED, args.device)
        cuda = args.device.startswith("cuda")
        sync = torch.cuda.synchronize if cuda else (lambda: None)

        def call():
            with torch.no_grad():
                return model(*args_in)

        t0 = time.perf_counter()
        for _ in range(max(args.warmup, 1)):  # compiles Triton kernels and extensions
            call()
            sync()
        manifest["warmup_s"] = time.perf_counter() - t0
        manifest["extensions"] = _extensions(loaded_before)
        if args.trace:
            from loopwise.kernels.profile.trace import record

            t0 = time.perf_counter()
            traced = record(call, out / "trace.json", warmup=0)
            manifest["trace_s"] = time.perf_counter() - t0
            manifest["trace_headline"] = traced.headline()
        if cuda:
            torch.cuda.nvtx.range_push(NVTX_RANGE)
        t0 = time.perf_counter()
        call()
        sync()
        manifest["call_s"] = time.perf_counter() - t0
        if cuda:
            torch.cuda.nvtx.range_pop()
            manifest["device_name"] = torch.cuda.get_device_name()
            manifest["sms"] = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        manifest["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - the caller reports it in one line
        if isinstance(exc, KeyboardInterrupt):
            raise
        manifest["error"] = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:400]
        manifest["traceback"] = traceback.format_exc()[-4000:]
        _write(out, manifest)
        return 2
    _write(out, manifest)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", required=True)
    ap.add_argument("--candidate", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--trace", action="store_true")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
