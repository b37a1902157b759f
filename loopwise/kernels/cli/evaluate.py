"""``loopwise kernels eval``, ``check`` and ``baseline``: verdicts on candidates, and the baselines
they are measured against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from loopwise.errors import UserError
from loopwise.kernels.cli.options import (CONFIG, DEVICE, JSON, KERNELBENCH, RUNS, SET, command_config,
                                          read_candidate, where)


def eval_cmd(
    problem: str = typer.Argument(..., help="Problem file or kernelbench:LEVEL/ID."),
    candidates: List[Path] = typer.Argument(..., help="Candidate source file(s) defining ModelNew."),
    tolerance: Optional[str] = typer.Option(None, help="strict (1e-4, default) or legacy (1e-2)."),
    precision: Optional[str] = typer.Option(None, help="fp32 (default: no TF32/fp16/bf16 math) or relaxed."),
    trials: Optional[int] = typer.Option(None, help="Correctness trials (default 5)."),
    perf_trials: Optional[int] = typer.Option(None, help="Timed calls (default 100)."),
    no_static: bool = typer.Option(False, "--no-static", help="Skip the static scan (dynamic checks only)."),
    resume: Optional[str] = typer.Option(None, help="Resume run ID: candidates already judged are not re-run."),
    kernelbench: Optional[str] = KERNELBENCH,
    device: Optional[str] = DEVICE,
    runs_dir: Optional[str] = RUNS,
    config: Optional[Path] = CONFIG,
    overrides: Optional[List[str]] = SET,
    as_json: bool = JSON,
) -> None:
    """Judge candidates: correct?, speedup, energy, and the reasons behind the verdict."""
    from loopwise.kernels.eval_runs import evaluate_candidates

    extra = []
    for key, value in (("tolerance", tolerance), ("precision", precision), ("correct_trials", trials),
                       ("perf_trials", perf_trials)):
        if value is not None:
            extra.append(f"kernels.eval.{key}={value}")
    if no_static:
        extra.append("kernels.eval.static_check=false")
    cfg = command_config(config, overrides, extra + where(device, kernelbench, runs_dir), (resume, "kernels.eval"))
    sources = [(str(p), read_candidate(p)) for p in candidates]
    code = evaluate_candidates(problem, sources, cfg, as_json=as_json, resume=resume)
    raise typer.Exit(code)


def check_cmd(
    candidates: List[Path] = typer.Argument(..., help="Candidate source file(s)."),
    policy: str = typer.Option("fp32", help="Precision policy: fp32 or relaxed."),
    problem: Optional[str] = typer.Option(None, "--problem", help="The candidates' problem (file or "
                                          "kernelbench:LEVEL/ID): a bf16 / fp16 problem's own precision is "
                                          "then not a downgrade, as the judge scans it."),
    kernelbench: Optional[str] = KERNELBENCH,
    as_json: bool = JSON,
) -> None:
    """Static exploit and precision scan (no GPU needed). Exit status 1 if any candidate is rejected."""
    from loopwise.kernels.check import scan
    from loopwise.kernels.report.terminal import print_check

    if policy not in ("fp32", "relaxed"):
        raise UserError(f"--policy {policy!r}: expected fp32 or relaxed")
    if problem:
        from loopwise.kernels.evaluate.verdict import static_policy
        from loopwise.kernels.problem import load_problem

        policy = static_policy(load_problem(problem, kernelbench), policy)
    results = [(str(p), scan(read_candidate(p), policy=policy, filename=str(p))) for p in candidates]
    rejected = any(any(r.severity == "reject" for r in reasons) for _, reasons in results)
    if as_json:
        typer.echo(json.dumps([{"candidate": name, "rejected": any(r.severity == "reject" for r in reasons),
                                "reasons": [r.model_dump() for r in reasons]} for name, reasons in results],
                              indent=2))
    else:
        print_check(results, policy)
    raise typer.Exit(1 if rejected else 0)


def baseline_cmd(
    problems: List[str] = typer.Argument(..., help="Problem files or kernelbench:LEVEL/ID."),
    max_autotune: bool = typer.Option(False, "--max-autotune", help="Also time torch.compile max-autotune."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Skip torch.compile (default mode)."),
    tf32: bool = typer.Option(False, "--tf32", help="Also time eager with TF32 allowed (not fp32 math)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Measure again even if cached."),
    kernelbench: Optional[str] = KERNELBENCH,
    device: Optional[str] = DEVICE,
    config: Optional[Path] = CONFIG,
    overrides: Optional[List[str]] = SET,
    as_json: bool = JSON,
) -> None:
    """Eager vs torch.compile (vs max-autotune, vs eager with TF32) vs the speed-of-light floor, per problem."""
    from loopwise.kernels.eval_runs import baseline_problems

    extra = []
    if max_autotune:
        extra.append("kernels.baseline.max_autotune=true")
    if no_compile:
        extra.append("kernels.baseline.compile=false")
    if tf32:
        extra.append("kernels.baseline.tf32=true")
    if no_cache:
        extra.append("kernels.baseline.cache=false")
    baseline_problems(problems, command_config(config, overrides, extra + where(device, kernelbench)), as_json=as_json)
