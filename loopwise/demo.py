"""``loopwise demo``: the main job on the embedded defaults, with no API key and no download.

It judges the bundled example problem's candidates (a fused Triton kernel, a subtly wrong one and
a cheat) with the full harness, times the reference variants, then runs a short search with the
expert proposer on a bundled softmax and writes its HTML report. With an NVIDIA GPU the numbers are
real; without one, Triton runs in its CPU interpreter and the demo says so. Then it plans ResNet-50's
DRAM traffic on the NeuronCore-v2-like target and runs a smoke search over staged GRPO schedules
(both on the CPU, a few seconds each).
"""

from __future__ import annotations

import os
from importlib import resources

import typer


def _examples() -> tuple[str, list[str]]:
    root = resources.files("loopwise.kernels") / "examples"
    problem = str(root / "scaled_gelu_problem.py")
    cands = [str(root / f"scaled_gelu_{n}.py") for n in ("triton", "wrong", "cheat")]
    return problem, cands


def _optimize(console, cfg, on_gpu: bool) -> None:
    """A short search with the expert proposer on the bundled softmax, then its HTML report."""
    from loopwise.kernels.optimize import Settings, run_optimize

    problem = str(resources.files("loopwise.kernels") / "examples" / "softmax_problem.py")
    console.rule("[bold]search: expert proposer + MCTS")
    settings = Settings(problem=problem, proposer="expert", search="mcts", budget=8 if on_gpu else 3)
    run_optimize(settings, cfg)
    from loopwise.core.store import list_runs

    run_id = list_runs(cfg.store.runs_dir)[-1].run_id
    from loopwise.core.run import open_run
    from loopwise.kernels.report.optimize_html import build_report

    with open_run(cfg.store.runs_dir, run_id, "kernels.optimize") as store:
        console.print(f"report: {build_report(store)} (open it in a browser; it works offline)")


def _memory(console) -> None:
    """ResNet-50 (batch 1) on the NeuronCore-v2-like target: the whole-model plan against its bounds."""
    from loopwise.memory.planner import plan
    from loopwise.memory.targets import load_target
    from loopwise.memory.torch_import import load_torch

    console.rule("[bold]memory: ResNet-50 on a NeuronCore-v2-like scratchpad")
    target = load_target("neuroncore-v2")
    graph = load_torch("zoo:resnet50", batch=1).graph
    p = plan(graph, target.scratchpad.bytes)
    console.print(f"{len(graph.operators)} operators in {len(p.groups)} groups: the plan moves {p.total_bytes / 1e6:.1f} MB "
                  f"through DRAM, the compulsory bound is {p.compulsory_bytes / 1e6:.1f} MB and layer by layer would move "
                  f"{p.layer_by_layer_bytes / 1e6:.1f} MB; {p.pairs_removed} store -> load pairs removed. "
                  "(`loopwise memory plan zoo:resnet50 --html plan.html` for the per-layer report.)")


def _training(console, runs_dir: str) -> None:
    """A smoke search over staged GRPO schedules against the staging-alone control, and its report."""
    from loopwise.training.cli import _table
    from loopwise.training.report_html import build_report
    from loopwise.training.run import Settings, TrainingRun

    console.rule("[bold]training: staged GRPO schedules (smoke preset, CPU)")
    console.print("A tiny character transformer, warm-started on reversed-digit addition, then 4 GRPO stages per "
                  "method: the tree search (diagnosis + coordinated transitions) against the same stages without "
                  "diagnosis. At this size the rewards are a pipeline check, not a comparison.")
    run = TrainingRun.start(Settings("arithmetic", ("tree", "staged"), budget=4, depth=2, preset="smoke", difficulty=0,
                                     device="cpu"), runs_dir)
    try:
        results = run.run()
        _table(run, results)
        console.print(f"report: {build_report(run.store)}")
    finally:
        run.close()


def demo(
    runs_dir: str = typer.Option("runs", help="Where the run store writes this run."),
    device: str = typer.Option("auto", help="auto, cuda or cpu."),
) -> None:
    from loopwise.core.console import console as make_console
    from loopwise.kernels.device import resolve_device

    console = make_console()
    # On the CPU this switches Triton's interpreter on, before anything imports triton.
    on_gpu = resolve_device(device).startswith("cuda")
    from loopwise.config import load_config
    from loopwise.kernels.eval_runs import baseline_problems, evaluate_candidates

    problem, cands = _examples()
    overrides = [f"store.runs_dir={runs_dir}", f"kernels.device={'cuda' if on_gpu else 'cpu'}"]
    if not on_gpu:
        overrides += ["kernels.eval.perf_trials=20", "kernels.baseline.perf_trials=20"]
    cfg = load_config(None, overrides)
    console.rule("[bold]loopwise demo: the kernel judge")
    console.print("Judging three candidates for a bias + GELU + scale problem: a fused Triton kernel, "
                  "a subtly wrong one, and a cheat that computes in a background thread.")
    sources = [(os.path.basename(c).replace("scaled_gelu_", ""), open(c, encoding="utf-8").read()) for c in cands]
    evaluate_candidates(problem, sources, cfg)
    console.rule("[bold]reference variants")
    baseline_problems([problem], cfg)
    _optimize(console, cfg, on_gpu)
    if not on_gpu:
        console.print("[yellow]No NVIDIA GPU here: Triton ran in its CPU interpreter, so the times above say "
                      "nothing about kernel speed. The verdicts (correct / wrong / exploit) are real. The kernel "
                      "engine needs an NVIDIA GPU for speedups.[/]")
    _memory(console)
    _training(console, runs_dir)
