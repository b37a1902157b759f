"""The MoE table: our Triton MoE candidates against the PyTorch loop (eager), torch.compile and
VeOmni's fused Triton MoE, forward and forward+backward, on the problems of
loopwise/kernels/examples/moe/ (a Qwen3-30B-A3B expert block on 4096 tokens, bf16).

- ours: the candidates moe_forward_triton.py / moe_forward_backward_triton.py, each judged in
  ``len(TILES)`` tile shapes (the search: a grid over BLOCK_M, BLOCK_N, BLOCK_K; the budget is the
  number judged); the fastest correct one is ours.
- VeOmni: ``TritonFusedMoeExpertFunction`` (veomni 0.1.12, carried as a wheel) called by a candidate
  this script writes, with the weights in VeOmni's layouts (gate and up [E, F, H], down [E, H, F]),
  made once at construction; its backward is the function's own autograd, its weight gradients
  turned back into the problem's layouts.
- VeOmni's CuTe-DSL path (contender ``veomni-quack``): ``QuackFusedMoeExpertFunction``, the same
  call with its grouped GEMMs from ``quack.gemm_interface`` (quack-kernels on the CUTLASS CuTe DSL,
  SM90+). It needs quack-kernels and nvidia-cutlass-dsl, which the device's image lacks and whose
  CUDA 13 library wheel is over one call's carry (``bench/split_wheels.sh quack`` brings them over
  two calls); where they do not import, the table says so in a row instead.
- eager and torch.compile: the judge's reference time and bench/baseline_table.py's protocol
  (kernels.baseline) for the compiled reference.

Every contender is judged by the same judge (correctness over its trials, then timing) on the
problem as written, whose routes are drawn per call in a random pattern: these rows (pattern
``random``) check that a contender is correct on all routing patterns. Our best (the fastest
correct tile shape, else the candidate's own) and VeOmni are then judged again on each routing
pattern pinned alone (``--patterns``; uniform, skewed, duplicate, single), one evaluation per
contender and pattern giving both its status and its time, so a contender wrong on one pattern
still has its speed on the others, and ours over VeOmni is taken on each pattern both get right.
The pinned evaluations are lighter than the random-pattern ones (``--pattern-correct-trials`` trials
and one stress trial, ``--pattern-perf-trials`` timed calls, the eager reference's time measured once
per pattern for both contenders) and all judges share one pool of sandboxes, to keep the whole run
near 8 minutes on an H200; rows are written as they finish, so a run stopped early keeps them.

    source bench/remote_prelude.sh; python3 bench/moe_table.py [--patterns uniform,single]
        [--contenders compile,ours,veomni,veomni-quack]

Writes $OUT/moe.csv (a row per problem, contender and pattern) and $OUT/moe.md.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
MOE = REPO / "loopwise" / "kernels" / "examples" / "moe"
PROBLEMS = {"forward": ("moe_forward.py", "moe_forward_triton.py"),
            "forward+backward": ("moe_forward_backward.py", "moe_forward_backward_triton.py")}
TILES = [(64, 64, 64), (64, 128, 64), (128, 64, 64), (128, 128, 64), (64, 128, 32)]
PATTERNS = ("uniform", "skewed", "duplicate", "single")
RANDOM = "random"  # the pattern column of the rows judged on the problem as written
FIELDS = ["problem", "contender", "variant", "pattern", "status", "ms", "eager_ms", "speedup_vs_eager", "budget",
          "reason", "seconds", "patterns_correct", "compile_ms", "vs_veomni", "vs_veomni_quack"]
CONTENDERS = ("compile", "ours", "veomni", "veomni-quack")
_TILE_LINE = re.compile(r"^    BLOCK_M, BLOCK_N, BLOCK_K = \d+, \d+, \d+$", re.M)

VEOMNI = '''
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import torch
import torch.nn as nn


def _veomni_moe():
    """VeOmni's MODULE.FUNCTION without running veomni/__init__ (it imports a whole training
    stack): the parent packages become bare namespace modules, and the two modules its file
    imports for expert parallelism only become stubs."""
    if "veomni.ops.kernels.moe.MODULE" not in sys.modules:
        spec = importlib.util.find_spec("veomni")
        root = Path(list(spec.submodule_search_locations)[0])
        for name in ("veomni", "veomni.ops", "veomni.ops.kernels", "veomni.ops.kernels.moe", "veomni.distributed"):
            module = types.ModuleType(name)
            module.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
            sys.modules.setdefault(name, module)
        moe, state = types.ModuleType("veomni.distributed.moe"), types.ModuleType("veomni.distributed.parallel_state")
        moe.EPGroupGemm = moe.EPMergedFc1GroupGemm = moe.dispatch_to_ep_class = None
        moe.preprocess = moe.token_pre_all2all = moe.tokens_post_all2all = None
        state.get_parallel_state = None
        sys.modules.setdefault("veomni.distributed.moe", moe)
        sys.modules.setdefault("veomni.distributed.parallel_state", state)
    return importlib.import_module("veomni.ops.kernels.moe.MODULE").FUNCTION


class ModelNew(nn.Module):
    def __init__(self, hidden=2048, intermediate=768, experts=128):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        gate_up = (torch.randn(experts, hidden, 2 * intermediate, generator=g) * hidden ** -0.5).to(torch.bfloat16)
        down = (torch.randn(experts, intermediate, hidden, generator=g) * intermediate ** -0.5).to(torch.bfloat16)
        self.fc1_1 = nn.Parameter(gate_up[:, :, :intermediate].transpose(1, 2).contiguous())
        self.fc1_2 = nn.Parameter(gate_up[:, :, intermediate:].transpose(1, 2).contiguous())
        self.fc2 = nn.Parameter(down.transpose(1, 2).contiguous())
        self.experts = experts

    def _moe(self, x, topk_ids, topk_weights):
        return _veomni_moe().apply(self.experts, topk_weights.to(x.dtype), topk_ids, x, self.fc1_1, self.fc1_2,
                                   self.fc2)
'''
_FORWARD = '''
    def forward(self, x, topk_ids, topk_weights):
        with torch.no_grad():
            return self._moe(x, topk_ids, topk_weights)
'''
_BACKWARD = '''
    def forward(self, x, topk_ids, topk_weights, grad_out):
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            out = self._moe(x, topk_ids, topk_weights)
            dx, d1, d2, d3 = torch.autograd.grad(out, (x, self.fc1_1, self.fc1_2, self.fc2), grad_out)
        d_gate_up = torch.cat([d1.transpose(1, 2), d2.transpose(1, 2)], dim=2)
        return out.detach(), dx, d_gate_up, d3.transpose(1, 2)
'''
# contender -> (VeOmni module under veomni/ops/kernels/moe/, its autograd function); both take the
# same arguments and weight layouts
VEOMNI_FUNCTIONS = {"veomni": ("group_gemm", "TritonFusedMoeExpertFunction"),
                    "veomni-quack": ("quack_gemm", "QuackFusedMoeExpertFunction")}


def veomni_source(contender: str, backward: bool) -> str:
    """The candidate calling ``contender``'s VeOmni function, for the forward or forward+backward problem."""
    module, function = VEOMNI_FUNCTIONS[contender]
    return VEOMNI.replace("MODULE", module).replace("FUNCTION", function) + (_BACKWARD if backward else _FORWARD)


VEOMNI_FORWARD = veomni_source("veomni", backward=False)
VEOMNI_BACKWARD = veomni_source("veomni", backward=True)


def unavailable(contender: str) -> str | None:
    """Why ``contender`` cannot run on this machine, or None. VeOmni's quack path needs the
    quack-kernels and nvidia-cutlass-dsl packages and a Hopper or newer GPU."""
    import importlib.util

    if contender != "veomni-quack":
        return None
    missing = [name for name, module in (("quack-kernels", "quack"), ("nvidia-cutlass-dsl", "cutlass"))
               if importlib.util.find_spec(module) is None]
    if missing:
        return (f"{' and '.join(missing)} not installed (the device's image has neither; "
                "bench/split_wheels.sh quack carries them over two calls)")
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        return "quack's grouped GEMMs need an SM90+ GPU"
    return None


def with_tiles(source: str, tiles: tuple[int, int, int]) -> str:
    """The candidate's source with its tile shape replaced."""
    new, n = _TILE_LINE.subn("    BLOCK_M, BLOCK_N, BLOCK_K = %d, %d, %d" % tiles, source)
    if n != 1:
        raise ValueError("the candidate does not declare its tile shape on one line")
    return new


def pinned(source: str, pattern: str) -> str:
    """The problem's source with its routes drawn in one pattern only."""
    new, n = re.subn(r"ids, weights = routes\(\)", f"ids, weights = routes(pattern={pattern!r})", source)
    if n != 1:
        raise ValueError("the problem does not draw its routes in one get_inputs() line")
    return new


def judge_for(problem, *, baseline: bool = False, pool=None, overrides: list[str] | None = None):
    from loopwise.config import load_config
    from loopwise.kernels.evaluate.judge import LocalJudge

    extra = ["kernels.eval.static_check=false", "kernels.eval.require_custom_kernel=false"] if baseline else []
    cfg = load_config(None, extra + list(overrides or []))
    return LocalJudge(problem, cfg.kernels.eval, device="cuda", pool=pool, spares=1)


def shared_pool():
    """One pool of sandboxes for every judge of the run (a judge kills the sandbox it used, so a
    spare never ran candidate code), so each judge does not start its own."""
    from loopwise.config import load_config
    from loopwise.kernels.evaluate.pool import SandboxPool

    cfg = load_config(None, []).kernels.eval
    return SandboxPool("cuda", {"gpu_memory_fraction": cfg.gpu_memory_fraction, "host_memory_gb": cfg.host_memory_gb},
                       spares=1)


def row(problem: str, contender: str, variant: str, ev, budget: int, seconds: float, pattern: str = RANDOM,
        eager_ms: float | None = None) -> dict:
    """A table row from one evaluation; ``eager_ms`` stands in where the evaluation has no reference
    time (a candidate that failed is not timed, nor is the reference beside it)."""
    timing = ev.timing.median_ms if ev.timing else None
    eager = ev.reference_timing.median_ms if ev.reference_timing else eager_ms
    return {"problem": problem, "contender": contender, "variant": variant, "pattern": pattern,
            "status": ev.status.value, "ms": timing if ev.correct else None, "eager_ms": eager,
            "speedup_vs_eager": ev.speedup, "budget": budget,
            "reason": "; ".join(f"{r.code}: {r.message}" for r in ev.rejections)[:300], "seconds": round(seconds, 1)}


def eager_ms_of(judge) -> float | None:
    """The judge's eager reference time (measured once per judge, before its first candidate)."""
    try:
        ref = judge.reference_timing()
    except Exception:  # noqa: BLE001 - a row without an eager time, not a failed table
        return None
    return ref.timing.median_ms if ref is not None and ref.timing is not None else None


def pattern_variant(rows: list[dict], problem: str, source: str) -> tuple[str, str]:
    """Our variant judged on each pinned pattern: the fastest tile shape correct on the random-pattern
    judge, else the candidate as written (so its speed is still taken where it is right)."""
    ours = [r for r in rows if r["problem"] == problem and r["contender"] == "ours" and r["pattern"] == RANDOM
            and r["status"] == "correct" and r.get("speedup_vs_eager")]
    if ours:
        best = max(ours, key=lambda r: r["speedup_vs_eager"])
        return best["variant"], with_tiles(source, tuple(int(t) for t in best["variant"].split("x")))
    match = _TILE_LINE.search(source)
    return match.group(0).split("=")[1].strip().replace(", ", "x") + " (as written)", source


def annotate(rows: list[dict]) -> None:
    """Fills in, from the pinned rows: each random-pattern row's ``patterns_correct`` (for the
    variant judged pinned), and ours over each VeOmni path (its ms / ours: ``vs_veomni``,
    ``vs_veomni_quack``) on each pattern both got right."""
    pinned = [r for r in rows if r["pattern"] != RANDOM]
    for r in rows:
        if r["pattern"] == RANDOM and r["contender"] in ("ours", *VEOMNI_FUNCTIONS):
            same = [p for p in pinned if p["problem"] == r["problem"] and p["contender"] == r["contender"]
                    and p["variant"].split(" ")[0] == r["variant"]]
            if same:
                r["patterns_correct"] = ",".join(p["pattern"] for p in same if p["status"] == "correct")
    for r in pinned:
        if r["contender"] != "ours" or not r.get("ms"):
            continue
        for contender in VEOMNI_FUNCTIONS:
            other = [p for p in pinned if p["problem"] == r["problem"] and p["pattern"] == r["pattern"]
                     and p["contender"] == contender and p.get("ms")]
            if other:
                r["vs_" + contender.replace("-", "_")] = other[0]["ms"] / r["ms"]


def main(argv: list[str] | None = None) -> int:
    from loopwise.config import load_config
    from loopwise.kernels.baseline import run_baseline
    from loopwise.kernels.problem import load_problem

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default="forward,forward+backward")
    ap.add_argument("--patterns", default=",".join(PATTERNS),
                    help="routing patterns to pin one by one for our best and VeOmni ('' for none)")
    ap.add_argument("--pattern-perf-trials", type=int, default=30,
                    help="timed calls of each pinned evaluation (and of its eager reference)")
    ap.add_argument("--pattern-correct-trials", type=int, default=2,
                    help="correctness trials of each pinned evaluation (plus one stress trial)")
    ap.add_argument("--contenders", default=",".join(CONTENDERS),
                    help="which to run: compile (torch.compile), ours, veomni (its Triton path), veomni-quack "
                         "(its CuTe-DSL path; a row saying why where it cannot run)")
    args = ap.parse_args(argv)
    patterns = [p for p in args.patterns.split(",") if p]
    unknown = sorted(set(patterns) - set(PATTERNS))
    if unknown:
        ap.error(f"unknown patterns {unknown}; known: {','.join(PATTERNS)}")
    contenders = [c for c in args.contenders.split(",") if c]
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown or not contenders:
        ap.error(f"unknown contenders {unknown}; known: {','.join(CONTENDERS)}")
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    pinned_overrides = [f"kernels.eval.perf_trials={args.pattern_perf_trials}",
                        f"kernels.eval.correct_trials={args.pattern_correct_trials}", "kernels.eval.stress_trials=1"]

    def save() -> None:
        with open(out / "moe.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=FIELDS)
            w.writeheader()
            w.writerows({k: r.get(k) for k in FIELDS} for r in rows)
        (out / "moe.md").write_text(summary(rows))

    pool = shared_pool()
    try:
        for label in [p for p in args.problems.split(",") if p]:
            problem_file, candidate_file = PROBLEMS[label]
            problem = load_problem(str(MOE / problem_file))
            compile_ms = None
            if "compile" in contenders:
                cfg = load_config(None, ["kernels.baseline.compile=true"])
                t0 = time.monotonic()
                base = run_baseline(problem, cfg, "cuda").to_json_dict(cfg.kernels.eval.statistic)
                compiled = base.get("compile") or {}
                compile_ms = (compiled.get("timing") or {}).get("median_ms") if compiled.get("status") == "ok" else None

            def add(r: dict, compile_ms=compile_ms) -> None:
                r["compile_ms"] = compile_ms
                rows.append(r)
                print(r, flush=True)

            if "compile" in contenders:
                add({"problem": label, "contender": "torch.compile", "variant": "default", "pattern": RANDOM,
                     "status": compiled.get("status"), "ms": compile_ms,
                     "eager_ms": ((base.get("eager") or {}).get("timing") or {}).get("median_ms"),
                     "speedup_vs_eager": compiled.get("speedup_vs_eager"), "budget": 0,
                     "reason": compiled.get("message") or "", "seconds": round(time.monotonic() - t0, 1)})
            source = (MOE / candidate_file).read_text()
            if "ours" in contenders:
                judge = judge_for(problem, pool=pool)
                for tiles in TILES:
                    t0 = time.monotonic()
                    ev = judge.evaluate(with_tiles(source, tiles), f"ours-{'x'.join(map(str, tiles))}")
                    add(row(label, "ours", "x".join(map(str, tiles)), ev, len(TILES), time.monotonic() - t0))
                del judge
            rivals = {}  # VeOmni contender -> its candidate source, for those that can run here
            for contender in [c for c in contenders if c in VEOMNI_FUNCTIONS]:
                function = VEOMNI_FUNCTIONS[contender][1]
                why = unavailable(contender)
                if why:
                    add({"problem": label, "contender": contender, "variant": function, "pattern": RANDOM,
                         "status": "unavailable", "budget": 0, "reason": why, "seconds": 0.0})
                    continue
                rivals[contender] = veomni_source(contender, backward=label != "forward")
                judge = judge_for(problem, baseline=True, pool=pool)
                t0 = time.monotonic()
                ev = judge.evaluate(rivals[contender], contender)
                add(row(label, contender, function, ev, 0, time.monotonic() - t0))
                del judge
            save()
            variant, ours_source = pattern_variant(rows, label, source)
            with tempfile.TemporaryDirectory() as tmp:
                for pattern in patterns:
                    path = Path(tmp) / f"{Path(problem_file).stem}_{pattern}.py"
                    path.write_text(pinned(problem.source, pattern))
                    pinned_problem = load_problem(str(path))
                    # one evaluation per contender and pattern: its status and, when correct, its time
                    judge = judge_for(pinned_problem, pool=pool, overrides=pinned_overrides)
                    if "ours" in contenders:
                        t0 = time.monotonic()
                        ev = judge.evaluate(ours_source, f"ours-{pattern}")
                        add(row(label, "ours", variant, ev, len(TILES), time.monotonic() - t0, pattern,
                                eager_ms_of(judge)))
                    for contender, rival in rivals.items():
                        other = judge_for(pinned_problem, baseline=True, pool=pool, overrides=pinned_overrides)
                        other.ref_times = judge.ref_times  # this pattern's eager time, measured once for all
                        t0 = time.monotonic()
                        ev = other.evaluate(rival, f"{contender}-{pattern}")
                        add(row(label, contender, VEOMNI_FUNCTIONS[contender][1], ev, 0, time.monotonic() - t0,
                                pattern, eager_ms_of(other)))
                        del other
                    del judge
                    annotate(rows)
                    save()
    finally:
        pool.close()
    return 0


def _ratio(x) -> str:
    return f"{x:.2f}x" if x else "-"


def summary(rows: list[dict]) -> str:
    """The markdown: the rows judged on the problem as written (random routes per call), then the
    rows judged on each routing pattern pinned alone. vs torch.compile divides the compiled
    reference's time, measured on the problem as written, by the row's."""
    def vs_compile(r):
        ms = r.get("ms")
        return r["compile_ms"] / ms if ms and r.get("compile_ms") and r["contender"] != "torch.compile" else None

    def ms_cell(value):
        return f"{value:.3f}" if value else "-"

    lines = ["Routes drawn per call in a random pattern (the problem as written):", "",
             "| problem | contender | variant | status | ms | vs eager | vs torch.compile | correct patterns |",
             "|---|---|---|---|---|---|---|---|"]
    def status_cell(r):
        reason = f" ({r['reason'][:120]})" if r["status"] not in ("correct", "ok") and r.get("reason") else ""
        return f"{r['status']}{reason}"

    for r in rows:
        if r.get("pattern", RANDOM) != RANDOM:
            continue
        lines.append(f"| {r['problem']} | {r['contender']} | {r['variant']} | {status_cell(r)} | {ms_cell(r.get('ms'))} | "
                     f"{_ratio(r.get('speedup_vs_eager'))} | {_ratio(vs_compile(r))} | {r.get('patterns_correct') or ''} |")
    pinned_rows = [r for r in rows if r.get("pattern", RANDOM) != RANDOM]
    if pinned_rows:
        lines += ["", "Each routing pattern pinned alone (one evaluation per contender and pattern; ms only "
                  "where correct; vs torch.compile against the compiled time above):", "",
                  "| problem | pattern | contender | variant | status | ms | eager ms | vs eager | vs torch.compile "
                  "| ours vs VeOmni | ours vs VeOmni quack |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        order = {p: i for i, p in enumerate(PATTERNS)}
        for r in sorted(pinned_rows, key=lambda r: (r["problem"], order.get(r["pattern"], 99))):
            lines.append(f"| {r['problem']} | {r['pattern']} | {r['contender']} | {r['variant']} | {status_cell(r)} | "
                         f"{ms_cell(r.get('ms'))} | {ms_cell(r.get('eager_ms'))} | {_ratio(r.get('speedup_vs_eager'))} | "
                         f"{_ratio(vs_compile(r))} | {_ratio(r.get('vs_veomni'))} | {_ratio(r.get('vs_veomni_quack'))} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
