"""The jobs behind ``kernels eval`` and ``kernels baseline``: load, judge, record, report.

Every verdict is appended to the run store as soon as it exists (one SQLite file per run), with
the candidate source and the sandbox log as content-addressed artifacts, so a crash or Ctrl-C
loses nothing already judged and ``--resume RUN`` picks up where it stopped.
"""

from __future__ import annotations

import json
import shlex
import sys
from contextlib import nullcontext

from loopwise.config import Config, dump_config
from loopwise.core.store import finite


def _console(as_json: bool):
    from loopwise.core.console import console as make_console

    # With --json, stdout carries only JSON; people-facing lines go to stderr.
    return make_console(stderr=True) if as_json else make_console()


def _open_store(cfg: Config, resume: str | None, kind: str):
    from loopwise.core.run import create_run, open_run

    if resume:
        return open_run(cfg.store.runs_dir, resume, kind)
    return create_run(cfg.store.runs_dir, kind, dump_config(cfg))


def _resume_command(store, cfg: Config, problem_spec: str, sources: list[tuple[str, str]]) -> str:
    """The command that judges the candidates not judged yet: the same problem and candidate files."""
    from pathlib import Path

    from loopwise.core.run import resume_command

    options = []
    if problem_spec.startswith("kernelbench:"):
        from loopwise.kernels.problem import _find_checkout

        options = ["--kernelbench", str(_find_checkout(cfg.kernels.kernelbench))]
    else:
        problem_spec = str(Path(problem_spec).resolve())
    words = ["loopwise", "kernels", "eval", problem_spec, *(str(Path(name).resolve()) for name, _ in sources)]
    return resume_command(shlex.join(words), store.meta.run_id, store.run_dir.parent, *options)


def evaluate_candidates(problem_spec: str, sources: list[tuple[str, str]], cfg: Config, *, as_json: bool = False,
                        resume: str | None = None) -> int:
    """Judges each candidate, records it, prints a table (or JSON). Returns the exit status."""
    from rich.markup import escape

    from loopwise.core.run import interruptible
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.evaluate.result import Evaluation
    from loopwise.kernels.problem import load_problem
    from loopwise.kernels.report.terminal import print_evaluations, progress

    console = _console(as_json)
    problem = load_problem(problem_spec, cfg.kernels.kernelbench)
    store = _open_store(cfg, resume, "kernels.eval")
    results: list[Evaluation] = []
    # Ctrl-C or SIGTERM: the verdicts so far are stored, the run says how to continue
    with interruptible(store, lambda: _resume_command(store, cfg, problem_spec, sources),
                       lambda line: console.print(escape(line), soft_wrap=True),
                       lambda: f"after {len(results)} of {len(sources)} candidates"), \
            LocalJudge(problem, cfg.kernels.eval, device=cfg.kernels.device,
                       log_dir=store.run_dir / "logs", spares=1 if len(sources) > 1 else 0) as judge:
        done = store.latest_by_key("evaluation")
        store.append("problem", {"name": problem.name, "sha256": problem.sha256, "device": judge.device_name})
        console.print(f"run [bold]{store.meta.run_id}[/] · {problem.name} on {judge.device_name} · "
                      f"policy {cfg.kernels.eval.precision}, tolerance {cfg.kernels.eval.tolerance}")
        native = judge.native([src for _, src in sources if judge.key(src) not in done])
        if len(native) > 1:
            console.print(f"compiling {len(native)} native candidates in parallel")
            judge.precompile(native)
        bar = progress(console) if len(sources) > 1 else nullcontext()
        with bar as prog:
            task = prog.add_task("judging", total=len(sources)) if prog else None
            for name, source in sources:
                key = judge.key(source)
                if key in done:
                    results.append(Evaluation.model_validate(done[key].payload["evaluation"]))
                else:
                    results.append(_judge_one(judge, store, name, source, key))
                if prog:
                    prog.advance(task)
    if as_json:
        sys.stdout.write(json.dumps([finite(e.to_json_dict()) for e in results], indent=2) + "\n")
    else:
        print_evaluations(console, results, store.meta.run_id)
    return 0 if all(e.correct for e in results) else 1


def record_evaluation(store, ev, key: str, **fields) -> dict:
    """Appends one verdict to the run store (its sandbox log as an artifact); returns the JSON data."""
    log_sha = store.put_artifact(ev.log or "", name=f"{ev.candidate}.log", media_type="text/plain")
    data = finite(ev.model_dump(mode="json"))
    data["log"] = ""  # the log lives in its artifact
    store.append("evaluation", {**fields, "evaluation": data, "log_sha256": log_sha}, key=key)
    return data


def _judge_one(judge, store, name: str, source: str, key: str):
    ev = judge.evaluate(source, name)
    src_sha = store.put_artifact(source, name=name, media_type="text/x-python")
    record_evaluation(store, ev, key, source_sha256=src_sha)
    return ev


def baseline_problems(specs: list[str], cfg: Config, *, as_json: bool = False) -> None:
    from loopwise.kernels.baseline import run_baseline
    from loopwise.kernels.device import resolve_device
    from loopwise.kernels.evaluate.pool import SandboxPool
    from loopwise.kernels.problem import load_problem
    from loopwise.kernels.report.terminal import print_baselines, progress

    console = _console(as_json)
    problems = [load_problem(s, cfg.kernels.kernelbench) for s in specs]
    device = resolve_device(cfg.kernels.device)
    ev = cfg.kernels.eval
    rows = []
    with SandboxPool(device, {"gpu_memory_fraction": ev.gpu_memory_fraction, "host_memory_gb": ev.host_memory_gb},
                     spares=1) as pool, progress(console) as prog:
        task = prog.add_task("baselines", total=len(problems))
        for problem in problems:
            prog.update(task, description=problem.name)
            rows.append(run_baseline(problem, cfg, device, pool))
            prog.advance(task)
    if as_json:
        sys.stdout.write(json.dumps([finite(r.to_json_dict(ev.statistic)) for r in rows], indent=2) + "\n")
    else:
        print_baselines(console, rows, ev.statistic)
