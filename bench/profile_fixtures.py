"""Records the profiling fixtures on the GPU machine and measures what profiling costs.

For every case of tests/kernels/profile_cases/ (and one KernelBench problem per level), runs
`loopwise kernels profile` logic with Nsight Compute (`--set full`), in "all" mode, and keeps per
case, under $OUT/profile_fixtures/<case>/: the ncu raw-page CSV, the torch.profiler trace, Triton's
cubins with their metadata (or the SASS text of a CUDA extension), and profile.json (kernels,
classes, findings). Writes summary.md / summary.csv: top finding against the designed label, and
the seconds each profiler took (issue: ncu < 30 s, SASS < 1 s per candidate).

    source bench/remote_prelude.sh; python3 bench/profile_fixtures.py [--cases a,b] [--levels]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "kernels" / "profile_cases"
# One problem per level for "profile works on a KernelBench problem of each level": level 1 with the
# expert's LayerNorm candidate, levels 2 and 3 on their reference models.
LEVELS = (("kernelbench:1/40", ROOT / "bench" / "candidates" / "40_LayerNorm__expert.py"),
          ("kernelbench:2/57", None), ("kernelbench:3/1", None))


def keep(report, work: Path, dest: Path) -> list[str]:
    """Copies what the fixture tests read into ``dest``; returns the kept file names."""
    dest.mkdir(parents=True, exist_ok=True)
    kept = []
    for key, name in (("ncu_csv", "ncu.csv"), ("trace", "trace.json"), ("json", "profile.json"),
                      ("roofline_png", "roofline.png")):
        if key in report.artifacts and Path(report.artifacts[key]).is_file():
            shutil.copy(report.artifacts[key], dest / name)
            kept.append(name)
    for source, name in ((work / "ceilings.json", "ceilings.json"), (work / "run" / "manifest.json", "manifest.json"),
                         (work / "hints.json", "hints.json")):
        if source.is_file():  # the device's roof and SM count: analyze() needs no GPU with them
            shutil.copy(source, dest / name)
            kept.append(name)
    for cubin in sorted((work / "triton").rglob("*.cubin")):
        shutil.copy(cubin, dest / cubin.name)
        kept.append(cubin.name)
        meta = cubin.with_suffix(".json")
        if meta.is_file():
            shutil.copy(meta, dest / meta.name)
    manifest = json.loads((work / "run" / "manifest.json").read_text())
    for so in manifest.get("extensions", []):
        from loopwise.kernels.profile.sass_tools import disassemble

        name = Path(so).stem + ".sass.txt"
        (dest / name).write_text(disassemble(so))
        kept.append(name)
    return kept


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated case names or kernelbench_L_ID (default: all)")
    ap.add_argument("--no-levels", action="store_true", help="skip the KernelBench problem per level")
    ap.add_argument("--kernelbench", default="third_party/KernelBench")
    ap.add_argument("--ncu-set", default="full")
    ap.add_argument("--budget-s", type=float, default=500.0)
    ap.add_argument("--device", default="cuda", help="cpu (with TRITON_INTERPRET=1 and --ncu off) rehearses on a CPU")
    ap.add_argument("--ncu", default="on", choices=("on", "auto", "off"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from loopwise.errors import UserError
    from loopwise.kernels.problem import load_problem
    from loopwise.kernels.profile.run import profile

    out = Path(os.environ.get("OUT", "bench_out")) / "profile_fixtures"
    work_root = Path(os.environ.get("LOOPWISE_CACHE_DIR", ".loopwise-cache")) / "profile_work"
    labels = json.loads((CASES / "cases.json").read_text())["cases"]
    jobs = [(name, str(CASES / labels[name].get("problem", name) / "problem.py"),
             CASES / name / "candidate.py" if (CASES / name / "candidate.py").is_file() else None, labels[name])
            for name in labels]
    if not args.no_levels:
        jobs += [(spec.replace(":", "_").replace("/", "_"), spec, cand, None) for spec, cand in LEVELS]
    wanted = [c for c in args.cases.split(",") if c]  # case names, or kernelbench_L_ID for a level's problem
    if wanted:
        unknown = sorted(set(wanted) - {job[0] for job in jobs})
        if unknown:
            ap.error(f"unknown case(s): {', '.join(unknown)}")
        jobs = [job for job in jobs if job[0] in wanted]
    rows, t_start = [], time.monotonic()
    for name, spec, candidate, label in jobs:
        if time.monotonic() - t_start > args.budget_s:
            print(f"--budget-s {args.budget_s} reached before {name}", flush=True)
            break
        row = {"case": name, "expected": (label or {}).get("expected") if label else "-"}
        t0 = time.perf_counter()
        try:
            problem = load_problem(spec, args.kernelbench)
            work = work_root / name
            shutil.rmtree(work, ignore_errors=True)
            precision = ((label or {}).get("hints") or {}).get("precision", "fp32")
            report = profile(problem, candidate, work, device=args.device, mode="all", ncu=args.ncu,
                             ncu_set=args.ncu_set, precision=precision)
            row["kept"] = " ".join(keep(report, work, out / name))
            row["kernels"] = len(report.kernels)
            row["classes"] = " ".join(sorted({k.kernel_class or "-" for k in report.kernels}))
            top = report.top_finding()  # None: nothing at severity low or above (nothing worth fixing)
            row["top"] = top.tool if top is not None else None
            row["top_score"] = round(top.score, 3) if top is not None else None
            row["match"] = (row["top"] == row["expected"]) if label else "-"
            row.update({k: v for k, v in report.costs_s.items()})
            row["notes"] = "; ".join(report.notes)[:300]
        except UserError as exc:
            row["error"] = str(exc)[:300]
        except Exception as exc:  # noqa: BLE001 - one case's failure must not lose the others
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(row, flush=True)
        write(out, rows)
    return 0


def write(out: Path, rows: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    lines = ["| case | kernels | classes | top finding (all mode) | designed label | match | ncu s | SASS s | run s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | error: {r['error']} | | | | | | | |")
            continue
        lines.append(f"| {r['case']} | {r.get('kernels')} | {r.get('classes')} | {r.get('top')} ({r.get('top_score')}) | "
                     f"{r.get('expected')} | {r.get('match')} | {r.get('ncu_s', '-')} | {r.get('sass_s', '-')} | "
                     f"{r.get('run_s', '-')} |")
    labelled = [r for r in rows if r.get("match") in (True, False)]
    if labelled:
        hits = sum(1 for r in labelled if r["match"] is True)
        lines.append(f"\ntop-1 against the designed labels: {hits} / {len(labelled)}")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
