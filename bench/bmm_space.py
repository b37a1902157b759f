"""Times the expert's Triton bmm template over launch settings its search space does not all hold
(BK 64, 4-5 pipeline stages, a tile twice as wide as tall) against torch.bmm (cuBLAS), on given
problems, so that a change to the space is decided on measurements (device only):

    python3 bench/bmm_space.py PROBLEM.py ... --out rows.csv

The extra settings are made by editing the rendered source's launch line (BN, num_stages), which is
what a knob for them would emit. For 16-bit problems it also times the batched CUTLASS variant
(``bmm_cutlass``) at a few valid tile / cluster / schedule settings, built in parallel first. Each
timing is the median of triton.testing.do_bench's repeats; the reference's time is re-measured
before and after each problem.
"""
from __future__ import annotations

import argparse
import csv
import os
import importlib.util
import itertools
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

from loopwise.kernels.backends import device_arch, precompile, prepare_environment
from loopwise.kernels.expert.capture.driver import capture
from loopwise.kernels.expert.generate import render
from loopwise.kernels.expert.matmul_variants import valid
from loopwise.kernels.problem import load_problem


def _module(source: str, path: Path):
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CUTLASS = [{"tile": "128x256x64", "cluster": "2x1", "schedule": "cooperative"},
           {"tile": "128x256x64", "cluster": "1x1", "schedule": "cooperative"},
           {"tile": "128x128x64", "cluster": "1x1", "schedule": "cooperative"},
           {"tile": "128x128x64", "cluster": "1x1", "schedule": "pingpong"},
           {"tile": "64x256x64", "cluster": "1x1", "schedule": "pingpong"},
           {"tile": "128x128x64", "cluster": "2x1", "schedule": "pingpong"}]


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def _measured(row: dict, source: str, path: Path, ref_mod, model, inputs, expected, error: str = "") -> dict:
    """``row`` with the candidate's median time and max error against the model's output, or the
    error that stopped it (a build that failed, a setting that does not compile or fit shared memory)."""
    try:
        if error:
            raise RuntimeError(error)
        mod = _module(source, path)
        cand = mod.ModelNew(*ref_mod.get_init_inputs()).cuda().eval()
        cand.load_state_dict(model.state_dict(), strict=False)
        got = cand(*inputs)
        err = (got.float() - expected.float()).abs().max().item()
        row.update(ms=_time(lambda: cand(*inputs)), max_err=err)
    except Exception as exc:  # noqa: BLE001 - a row of its own
        row.update(ms="", max_err="", error=f"{type(exc).__name__}: {str(exc)[:120]}")
    print(row, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(tmp / "extensions"))
    rows = []
    for spec in args.problems:
        problem = load_problem(spec)
        pattern = capture(problem)
        ref_mod = _module(Path(spec).read_text(), tmp / "ref.py")
        torch.manual_seed(0)
        model = ref_mod.Model(*ref_mod.get_init_inputs()).cuda().eval()
        inputs = [x.cuda() for x in ref_mod.get_inputs()]
        with torch.no_grad():
            expected = model(*inputs)
            ref_before = _time(lambda: model(*inputs))
            for i, (block, warps, chunk, stages, wide) in enumerate(itertools.product(
                    [64, 128], [4, 8], [32, 64], [3, 4, 5], [0, 1])):
                source = render(pattern, {"template": "bmm", "block": block, "warps": warps, "chunk": chunk},
                                precision="fp32")
                source = source.replace("num_stages=3", f"num_stages={stages}")
                if wide:
                    source = source.replace(f"BN={block},", f"BN={2 * block},").replace(
                        f"triton.cdiv(N, {block})", f"triton.cdiv(N, {2 * block})")
                row = {"problem": Path(spec).name, "variant": "bmm", "block": block, "warps": warps, "chunk": chunk,
                       "stages": stages, "bn": block * (2 if wide else 1)}
                rows.append(_measured(row, source, tmp / f"cand_{i}.py", ref_mod, model, inputs, expected))
            if pattern.params and dict(pattern.params).get("dtype") in ("float16", "bfloat16"):
                files = []
                for j, knobs in enumerate(k for k in CUTLASS if valid("bmm_cutlass", k)):
                    path = tmp / f"cutlass_{Path(spec).stem}_{j}.py"
                    path.write_text(render(pattern, {"template": "bmm_cutlass", **knobs}, precision="fp32"))
                    files.append((knobs, path))
                arch = device_arch("cuda")  # the judge's own parallel build, then its load_inline wrapper
                builds = precompile([f[1].read_text() for f in files], os.environ["TORCH_EXTENSIONS_DIR"], arch)
                prepare_environment({"arch": arch}, "cuda")
                built = ["" if b.ok else b.message for b in builds]
                for (knobs, path), error in zip(files, built):
                    row = {"problem": Path(spec).name, "variant": "bmm_cutlass", **knobs}
                    rows.append(_measured(row, path.read_text(), path, ref_mod, model, inputs, expected, error))
            ref_after = _time(lambda: model(*inputs))
        for row in rows:
            if row["problem"] == Path(spec).name:
                row.update(ref_ms_before=ref_before, ref_ms_after=ref_after)
    fields = ["problem", "variant", "block", "bn", "warps", "chunk", "stages", "tile", "cluster", "schedule", "ms",
              "max_err", "ref_ms_before",
              "ref_ms_after", "error"]
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")


if __name__ == "__main__":
    sys.exit(main())
