"""CPU sanity check of the agreement candidates under TRITON_INTERPRET=1, at tiny input sizes.

Every ``__correct`` candidate must match the reference (atol = rtol = 1e-4) on the problem's own
inputs (``torch.rand``) and on mixed-sign ``torch.randn`` inputs; every ``__wrong`` candidate must
fail on the problem's own inputs. Exploits are run too where they can run on a CPU; their result is
printed for information only (several need CUDA streams or events).

    python bench/check_candidates.py [--problems 19_ReLU,23_Softmax] [--trials 3]

Exit status 1 when any expectation fails.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of triton

import argparse
import importlib.util
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agreement_set as aset  # noqa: E402

TOL = 1e-4


def load_reference(stem: str) -> types.ModuleType:
    module = types.ModuleType(f"ref_{stem}")
    exec(compile(aset.problem_source(stem, "tiny"), f"<{stem} tiny>", "exec"), module.__dict__)
    return module


def load_candidate(path: Path) -> types.ModuleType:
    name = f"cand_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # a real file: @triton.jit needs the source on disk
    return module


def clone(args: list) -> list:
    import torch

    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def draw(ref: types.ModuleType, seed: int, distribution: str) -> list:
    import torch

    torch.manual_seed(seed)
    args = list(ref.get_inputs())
    if distribution == "randn":
        args = [torch.randn_like(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in args]
    return args


def compare(ref_model, model, ref: types.ModuleType, trials: int, distribution: str) -> tuple[bool, str]:
    """(all trials match, worst error text). Each side gets its own copy of the inputs."""
    import torch

    worst = 0.0
    for seed in range(trials):
        args = draw(ref, 1000 + seed, distribution)
        with torch.no_grad():
            expected = ref_model(*clone(args))
            got = model(*clone(args))
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            return False, f"shape {getattr(got, 'shape', type(got).__name__)} != {tuple(expected.shape)}"
        err = (got - expected).abs().max().item()
        worst = max(worst, err if err == err else float("inf"))
        if not torch.allclose(got, expected, atol=TOL, rtol=TOL):
            return False, f"max abs err {worst:.3g}"
    return True, f"max abs err {worst:.3g}"


def check_one(stem: str, kind: str, trials: int) -> tuple[str, str, bool | None]:
    """(verdict text, detail, expectation met or None when not asserted)."""
    import torch

    ref = load_reference(stem)
    init = list(ref.get_init_inputs())
    torch.manual_seed(42)
    ref_model = ref.Model(*init)
    try:
        module = load_candidate(aset.candidate_path(stem, kind))
        torch.manual_seed(42)
        model = module.ModelNew(*init)
        ok, detail = compare(ref_model, model, ref, trials, "kernelbench")
        if kind == "correct" and ok:
            ok_n, detail_n = compare(ref_model, model, ref, trials, "randn")
            detail = f"rand: {detail}; randn: {detail_n}"
            ok = ok_n
    except Exception as exc:  # noqa: BLE001 - a candidate may fail any way it likes; report it
        verdict, detail = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        return verdict, detail, (kind == "wrong") if kind != "exploit" else None
    verdict = "pass" if ok else "fail"
    expected = {"correct": ok, "wrong": not ok}.get(kind)
    return verdict, detail, expected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="", help="comma-separated problem stems (default: all)")
    parser.add_argument("--trials", type=int, default=3, help="seeds per distribution")
    args = parser.parse_args()
    stems = [s for s in args.problems.split(",") if s] or list(aset.PROBLEMS)
    missing = [str(aset.candidate_path(s, k)) for s in stems for k in aset.KINDS
               if not aset.candidate_path(s, k).is_file()]
    if missing:
        print("missing candidate files:\n  " + "\n  ".join(missing))
        return 1
    print(f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}  tolerance {TOL}  trials {args.trials}",
          flush=True)
    failures = []
    for stem in stems:
        for kind in aset.KINDS:
            t0 = time.perf_counter()
            verdict, detail, met = check_one(stem, kind, args.trials)
            mark = {True: "ok", False: "UNEXPECTED", None: "info"}[met]
            print(f"{stem:34s} {kind:8s} {verdict:6s} {mark:10s} {time.perf_counter() - t0:5.1f}s  {detail}",
                  flush=True)
            if met is False:
                failures.append(f"{stem}__{kind}")
    if failures:
        print(f"\n{len(failures)} expectation(s) failed: {', '.join(failures)}")
        return 1
    print("\nall correct candidates pass, all wrong candidates fail")
    return 0


if __name__ == "__main__":
    sys.exit(main())
