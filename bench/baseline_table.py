"""Non-LLM baselines on a fixed KernelBench subset: eager, torch.compile, max-autotune, floor.

Runs the logic of ``loopwise kernels baseline`` (``loopwise.kernels.baseline.run_baseline``, one
sandbox per variant, shared pool with one spare) problem by problem, writing each row as it
finishes to ``$OUT/baselines.csv`` and to a mirror under ``$LOOPWISE_CACHE_DIR/bench/``; a later
run skips problems already done (``--fresh`` redoes them), so ``--budget-s`` and the 10-minute
limit of a device call only pause the table.

Selection rule (fixed list below; ``--print-selection`` recomputes it): in each level, targets are
ids 1, 9, 17, ... (every 8th id); each target takes the smallest id >= it, not taken yet, whose
``get_inputs()`` tensors total at most 1 GiB (shapes read on the meta device) and which loads. At
KernelBench v0.1 sizes this leaves out every level-1 activation, reduction and pooling problem
(all > 1 GiB). Result: 12 level-1, 13 level-2 and 7 level-3 problems.

    source bench/remote_prelude.sh && python3 bench/baseline_table.py --budget-s 480
    python3 bench/baseline_table.py --levels 3 --max-autotune
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LEVELS = REPO / "third_party" / "KernelBench" / "KernelBench"
SELECTION: dict[int, tuple[int, ...]] = {
    1: (1, 9, 17, 40, 50, 54, 55, 58, 65, 73, 81, 95),
    2: (1, 9, 17, 25, 33, 41, 49, 57, 65, 73, 81, 89, 97),
    3: (1, 9, 17, 25, 33, 41, 50),
}
STRIDE, INPUT_LIMIT_BYTES = 8, 1 << 30
COLUMNS = [
    "level", "id", "problem", "input_mb", "eager_ms", "compile_ms", "max_autotune_ms", "floor_ms", "floor_bound",
    "compile_speedup", "max_autotune_speedup", "floor_speedup", "eager_mean_ms", "compile_mean_ms",
    "max_autotune_mean_ms", "eager_status", "compile_status", "max_autotune_status", "compile_load_s",
    "max_autotune_load_s", "eager_tf32_ms", "eager_tf32_speedup", "eager_tf32_mean_ms", "eager_tf32_status",
    "eager_tf32_load_s", "wall_s", "message", "finished_at",
]


# ---------------------------------------------------------------------------------------------
# selection


def input_bytes(problem) -> int | None:
    import torch

    sig = problem.signature
    if sig is None:
        return None
    total = 0
    for shape, dtype in zip(sig.input_shapes, sig.input_dtypes):
        if shape is not None and dtype is not None:
            total += math.prod(shape) * getattr(torch, dtype).itemsize
    return total


def compute_selection() -> dict[int, tuple[int, ...]]:
    """Applies the selection rule to the checkout (slow: validates every problem)."""
    from loopwise.kernels.problem import load_problem

    chosen: dict[int, tuple[int, ...]] = {}
    for level in SELECTION:
        fits: dict[int, bool] = {}
        for path in (LEVELS / f"level{level}").glob("*.py"):
            try:
                size = input_bytes(load_problem(str(path)))
            except Exception:  # noqa: BLE001 - a problem that does not load is not selectable
                size = None
            fits[int(path.name.split("_")[0])] = size is not None and size <= INPUT_LIMIT_BYTES
        taken: list[int] = []
        for target in range(1, max(fits) + 1, STRIDE):
            pick = next((i for i in sorted(fits) if i >= target and fits[i] and i not in taken), None)
            if pick is not None:
                taken.append(pick)
        chosen[level] = tuple(taken)
    return chosen


def problem_paths(levels: list[int], only: list[str], selection: dict | None = None) -> list[tuple[int, int, Path]]:
    out = []
    for level in levels:
        for pid in (selection or SELECTION)[level]:
            if only and f"{level}/{pid}" not in only:
                continue
            match = sorted((LEVELS / f"level{level}").glob(f"{pid}_*.py"))
            if not match:
                raise SystemExit(f"level{level} problem {pid} not found under {LEVELS}")
            out.append((level, pid, match[0]))
    return out


# ---------------------------------------------------------------------------------------------
# one problem


def make_config(args: argparse.Namespace):
    from loopwise.config import Config

    baseline = {"compile": not args.no_compile, "max_autotune": args.max_autotune, "tf32": args.tf32, "cache": False}
    if args.perf_trials:
        baseline["perf_trials"] = args.perf_trials
    evaluation: dict = {"energy": False}
    if args.compile_timeout_s:
        evaluation["compile_timeout_s"] = args.compile_timeout_s
    return Config.model_validate({"kernels": {"baseline": baseline, "eval": evaluation}})


def variant_fields(prefix: str, variant, eager) -> dict:
    if variant is None:
        return {f"{prefix}_status": "not run"}
    out = {f"{prefix}_status": variant.status, f"{prefix}_load_s": variant.load_s}
    if variant.timing is not None:
        out[f"{prefix}_ms"] = variant.timing.median_ms
        out[f"{prefix}_mean_ms"] = variant.timing.mean_ms
        if prefix != "eager" and eager is not None and eager.timing is not None:
            out[f"{prefix}_speedup"] = eager.timing.median_ms / max(variant.timing.median_ms, 1e-9)
    return out


def baseline_row(level: int, pid: int, path: Path, config, device: str, pool) -> dict:
    from loopwise.kernels.baseline import run_baseline
    from loopwise.kernels.problem import load_problem

    row: dict = {"level": level, "id": pid, "problem": path.stem}
    t0 = time.perf_counter()
    try:
        problem = load_problem(str(path))
        size = input_bytes(problem)
        row["input_mb"] = size / 1e6 if size is not None else None
        result = run_baseline(problem, config, device=device, pool=pool)
    except Exception as exc:  # noqa: BLE001 - one problem's failure is a row, not the end of the table
        row.update(eager_status="error", message=f"{type(exc).__name__}: {exc}"[:300])
        row["wall_s"] = time.perf_counter() - t0
        return row
    row.update(variant_fields("eager", result.eager, None))
    row.update(variant_fields("compile", result.compile, result.eager))
    row.update(variant_fields("max_autotune", result.max_autotune, result.eager))
    row.update(variant_fields("eager_tf32", result.eager_tf32, result.eager))
    row.update(floor_ms=result.floor_ms, floor_bound=result.floor_bound)
    if result.floor_ms and row.get("eager_ms"):
        row["floor_speedup"] = row["eager_ms"] / result.floor_ms  # the most any kernel could gain
    messages = [v.message for v in (result.eager, result.compile, result.max_autotune) if v is not None and v.message]
    row["message"] = "; ".join(messages + ([result.floor_note] if getattr(result, "floor_note", "") else []))[:300]
    row["wall_s"] = time.perf_counter() - t0
    return row


# ---------------------------------------------------------------------------------------------
# rows, resume, report


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def load_rows(paths: list[Path], key: tuple[str, ...] = ("level", "id")) -> dict[str, dict]:
    """Rows of the CSV files by "level/id[/...]" (the ``key`` fields); the latest finished wins."""
    rows: dict[str, dict] = {}
    for path in paths:
        if path.is_file():
            with path.open(newline="") as fh:
                for raw in csv.DictReader(fh):
                    name = "/".join(raw[k] for k in key)
                    if name not in rows or raw.get("finished_at", "") > rows[name].get("finished_at", ""):
                        rows[name] = {k: (v if v != "" else None) for k, v in raw.items()}
    return rows


def save_rows(paths: list[Path], rows: dict[str, dict], columns: list[str] = COLUMNS) -> None:
    """Every row to every path (atomically), ordered by level, id and the rest of its key."""
    ordered = sorted(rows.items(), key=lambda kv: (int(kv[1]["level"]), int(kv[1]["id"]), kv[0]))
    for path in paths:
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(columns)
            for _, row in ordered:
                writer.writerow([_cell(row.get(c)) for c in columns])
        os.replace(tmp, path)


def done(row: dict | None, args: argparse.Namespace) -> bool:
    if row is None or row.get("eager_status") not in ("ok",):
        return False
    if args.max_autotune and row.get("max_autotune_status") in (None, "not run"):
        return False
    if args.tf32 and row.get("eager_tf32_status") in (None, "not run"):
        return False
    return args.no_compile or row.get("compile_status") not in (None, "not run")


def _num(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _geomean(values: list[float]) -> str:
    values = [v for v in values if v and v > 0]
    if not values:
        return "n/a"
    return f"{math.exp(sum(math.log(v) for v in values) / len(values)):.2f} (n = {len(values)})"


def _environment() -> str:
    try:
        import torch
        import triton

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
        return (f"{gpu}; Python {platform.python_version()}, torch {torch.__version__} "
                f"(CUDA {torch.version.cuda}), triton {triton.__version__}")
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def write_markdown(path: Path, rows: dict[str, dict], args: argparse.Namespace, stopped: str) -> None:
    def f(v, fmt="{:.3f}"):
        v = _num(v)
        return fmt.format(v) if v is not None else "-"

    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# Non-LLM baselines on a KernelBench subset", "",
             f"- date: {when}; machine: {_environment()}",
             f"- command: `{' '.join(['python3', *sys.argv])}`{'; stopped: ' + stopped if stopped else ''}",
             "- selection: every 8th id per level, the next problem with <= 1 GiB of inputs (bench/baseline_table.py)",
             "- times: median ms over the configured perf trials (L2 flushed before each, CUDA events), eager fp32 "
             "with TF32 off; speedup = eager / variant; floor = loopwise's speed-of-light bound; "
             "floor speedup = eager / floor (the most any kernel could gain)", "",
             "| level | compile: geomean speedup | compile faster | max-autotune: geomean | eager / floor: geomean |",
             "|---|---|---|---|---|"]
    for level in sorted({int(r["level"]) for r in rows.values()}):
        sub = [r for r in rows.values() if int(r["level"]) == level]
        comp = [_num(r.get("compile_speedup")) for r in sub]
        faster = sum(1 for c in comp if c and c > 1)
        lines.append(f"| {level} | {_geomean(comp)} | {faster} / {sum(1 for c in comp if c)} | "
                     f"{_geomean([_num(r.get('max_autotune_speedup')) for r in sub])} | "
                     f"{_geomean([_num(r.get('floor_speedup')) for r in sub])} |")
    lines += ["", "| problem | inputs MB | eager ms | compile ms | max-autotune ms | floor ms (bound) | compile x | "
              "max-autotune x | eager / floor | note |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows.values(), key=lambda r: (int(r["level"]), int(r["id"]))):
        statuses = [f"{k}: {r.get(k + '_status')}" for k in ("eager", "compile", "max_autotune")
                    if r.get(k + "_status") not in (None, "ok", "not run")]
        note = "; ".join(statuses + ([r["message"]] if r.get("message") else []))[:120].replace("|", "/")
        lines.append(f"| L{r['level']}/{r['problem']} | {f(r.get('input_mb'), '{:.0f}')} | {f(r.get('eager_ms'))} | "
                     f"{f(r.get('compile_ms'))} | {f(r.get('max_autotune_ms'))} | {f(r.get('floor_ms'), '{:.4f}')} "
                     f"({r.get('floor_bound') or '-'}) | {f(r.get('compile_speedup'), '{:.2f}')} | "
                     f"{f(r.get('max_autotune_speedup'), '{:.2f}')} | {f(r.get('floor_speedup'), '{:.1f}')} | {note} |")
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------
# driver


def run(args: argparse.Namespace) -> int:
    from loopwise.kernels.device import resolve_device
    from loopwise.kernels.evaluate.pool import SandboxPool

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mirror = Path(os.environ.get("LOOPWISE_CACHE_DIR") or REPO / ".loopwise-cache") / "bench"
    mirror.mkdir(parents=True, exist_ok=True)
    paths = [out / "baselines.csv", mirror / "baselines.csv"]
    rows = {} if args.fresh else load_rows(paths)
    levels = [int(x) for x in args.levels.split(",") if x]
    selection = None
    if args.selection == "expert":  # the expert's subset: the same rule with stride 5 (bench/expert_subset.py)
        from expert_subset import SUBSET as selection
    todo = problem_paths(levels, [p for p in args.problems.split(",") if p], selection)
    config, device = make_config(args), resolve_device(args.device)
    ev = config.kernels.eval
    print(f"{len(todo)} problems, device {device}, compile {not args.no_compile}, max-autotune {args.max_autotune}, "
          f"perf trials {config.kernels.baseline.perf_trials}, budget {args.budget_s or 'none'} s", flush=True)
    t0, stopped, ran = time.perf_counter(), "", 0
    try:
        with SandboxPool(device, {"gpu_memory_fraction": ev.gpu_memory_fraction,
                                  "host_memory_gb": ev.host_memory_gb}, spares=1) as pool:
            for level, pid, path in todo:
                if done(rows.get(f"{level}/{pid}"), args):
                    continue
                if args.budget_s and time.perf_counter() - t0 > args.budget_s:
                    stopped = f"--budget-s {args.budget_s} reached"
                    break
                row = baseline_row(level, pid, path, config, device, pool)
                row["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
                rows[f"{level}/{pid}"] = row
                save_rows(paths, rows)
                ran += 1
                print(f"L{level}/{path.stem[:48]:48s} eager {_cell(row.get('eager_ms')):>9s} ms  compile "
                      f"{_cell(row.get('compile_speedup')):>8s}x  max-autotune {_cell(row.get('max_autotune_speedup')):>8s}x"
                      f"  floor {_cell(row.get('floor_ms')):>9s} ms  ({row['wall_s']:.0f} s) {row.get('message') or ''}",
                      flush=True)
    finally:
        save_rows(paths, rows)  # $OUT starts empty on the device: always leave the full table there
        write_markdown(out / "baselines.md", rows, args, stopped)
    left = sum(1 for level, pid, _ in todo if not done(rows.get(f"{level}/{pid}"), args))
    print(f"\n{ran} problem(s) run, {left} left{' (' + stopped + '; run again to resume)' if stopped else ''}; "
          f"wrote {out / 'baselines.csv'} and baselines.md", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="1,2,3")
    p.add_argument("--selection", choices=("baseline", "expert"), default="baseline",
                   help="baseline: every 8th id (this file); expert: every 5th (bench/expert_subset.py)")
    p.add_argument("--problems", default="", help="subset of the selection as LEVEL/ID, e.g. 1/40,3/9")
    p.add_argument("--max-autotune", action="store_true", help="also time torch.compile max-autotune (slow)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile default mode")
    p.add_argument("--tf32", action="store_true", help="also time eager with TF32 allowed (the relaxed yardstick)")
    p.add_argument("--perf-trials", type=int, default=0, help="timed calls per variant (0: config default)")
    p.add_argument("--compile-timeout-s", type=float, default=0.0,
                   help="per variant load + compile (0: config default, 600 s); a variant over it is "
                        "recorded as timeout")
    p.add_argument("--budget-s", type=float, default=480.0, help="start no new problem after this many seconds (0: none)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--fresh", action="store_true", help="ignore rows of earlier runs")
    p.add_argument("--out", default=os.environ.get("OUT") or "./bench_out")
    p.add_argument("--print-selection", action="store_true", help="recompute the selection rule and compare")
    return p.parse_args(argv)


def print_selection() -> int:
    computed = compute_selection()
    for level, ids in computed.items():
        print(f"level {level}: {ids}{'' if ids == SELECTION[level] else '  (differs from SELECTION: ' + str(SELECTION[level]) + ')'}")
    return 0 if computed == SELECTION else 1


if __name__ == "__main__":
    _args = parse_args()
    sys.exit(print_selection() if _args.print_selection else run(_args))
