"""Planning seconds of chosen memory-plan cells, and a byte-for-byte check that two sets of plans agree.

    OMP_NUM_THREADS=1 python3 bench/memory_speed.py run DIR [--cells gpt2:32:gpu-sm-shared,...]
    python3 bench/memory_speed.py diff BEFORE_DIR AFTER_DIR

`run` plans each cell as a user does (`loopwise memory plan zoo:MODEL --batch B --target T --out
DIR/MODEL-B-T.json`, the whole command, replay included) and appends `MODEL,B,T,WALL_S,STATUS,CPU_S`
to DIR/seconds.csv (CPU_S: the command's user and system seconds, which other work on the machine
changes less than its wall time). `diff` compares every plan of BEFORE_DIR with the one of the same name in
AFTER_DIR: every field but the run's id and the planning's seconds (top level) must be equal, the
plan's modelled time included; it prints each difference and
exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

CELLS = ",".join(f"{m}:32:{t}" for m in ("gpt2", "resnet50", "unet_small", "llama7b_layer_prefill", "convnext_t",
                                         "efficientnet_b0", "mobilenet_v2", "vit_b16")
                 for t in ("gpu-sm-shared", "scratchpad-1mib")) + ",gpt2:1:gpu-sm-shared,resnet50:32:neuroncore-v2"

# Top-level fields that name the run or time the planning, not the plan.
UNSTABLE = {"run_id", "seconds"}


def run(folder: Path, cells: str, timeout: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for cell in cells.split(","):
        model, batch, target = cell.split(":")
        path = folder / f"{model}-{batch}-{target}.json"
        t0, cpu0 = time.perf_counter(), _child_cpu()
        try:
            done = subprocess.run([sys.executable, "-m", "loopwise.cli", "memory", "plan", f"zoo:{model}", "--batch",
                                   batch, "--target", target, "--out", str(path), "--json",
                                   "--runs-dir", str(folder / "runs")], capture_output=True, text=True,
                                  timeout=timeout)
            status = "ok" if done.returncode == 0 else "failed: " + done.stderr.strip()[-200:]
        except subprocess.TimeoutExpired:
            status = "timeout"
        seconds, cpu = time.perf_counter() - t0, _child_cpu() - cpu0
        with (folder / "seconds.csv").open("a") as fh:
            fh.write(f"{model},{batch},{target},{seconds:.1f},{status},{cpu:.1f}\n")
        print(f"{model} b{batch} {target}: {seconds:.1f} s wall, {cpu:.1f} s cpu {status}", flush=True)


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _differences(a, b, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if not where and key in UNSTABLE:
                continue
            if key not in a or key not in b:
                out.append(f"{where}.{key}: only in {'after' if key in b else 'before'}")
            else:
                out += _differences(a[key], b[key], f"{where}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} before, {b!r} after"]


def diff(before: Path, after: Path) -> int:
    bad = 0
    for path in sorted(before.glob("*.json")):
        other = after / path.name
        if not other.exists():
            print(f"{path.name}: missing after")
            bad += 1
            continue
        found = _differences(json.loads(path.read_text()), json.loads(other.read_text()))
        bad += bool(found)
        print(f"{path.name}: {'identical' if not found else f'{len(found)} differences'}")
        for line in found[:20]:
            print("   ", line)
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("--cells", default=CELLS)
    r.add_argument("--timeout", type=float, default=600)
    d = sub.add_parser("diff")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "run":
        run(args.folder, args.cells, args.timeout)
    else:
        sys.exit(diff(args.before, args.after))


if __name__ == "__main__":
    main()
