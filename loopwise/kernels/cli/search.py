"""``loopwise kernels optimize``, ``bench`` and ``generate``: searches for faster kernels, for one
problem or a suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from loopwise.core.propose import EXCHANGE_TIMEOUT_S
from loopwise.errors import UserError
from loopwise.kernels.cli.options import (CONFIG, DEVICE, EXECUTOR, JSON, KERNELBENCH, RAY_ADDRESS, RUNS, SET,
                                          WORKERS, command_config, where)


def optimize_cmd(
    problem: Optional[str] = typer.Argument(None, help="Problem file or kernelbench:LEVEL/ID (not with --resume)."),
    proposer: str = typer.Option("expert", help="expert (no LLM), llm, exchange, or hybrid (the expert's first "
                                 "steps, then the model from the best node; the model: --llm-model, else "
                                 "--exchange-dir)."),
    search: str = typer.Option("mcts", help="mcts, greedy, beam, random or best-of-n."),
    budget: int = typer.Option(20, help="Candidates to judge."),
    objective: str = typer.Option("speed", help="speed, or energy (fewest joules within 3% of the best time)."),
    seed: int = typer.Option(0, help="Seed of the search and the proposer."),
    per_step: int = typer.Option(2, help="Proposals asked for at each expansion."),
    profiling: str = typer.Option("proactive", help="What the proposer learns from profiling each expanded "
                                  "candidate (CUDA only): proactive (tools chosen by the roofline class), all, "
                                  "raw (measurements only) or none."),
    profile_within: float = typer.Option(0.9, help="Profile a candidate only when its speedup is at least this "
                                         "share of the best so far (0: every expanded candidate)."),
    exchange_dir: Optional[str] = typer.Option(None, help="Folder for prompt/answer files (--proposer exchange)."),
    exchange_timeout: float = typer.Option(EXCHANGE_TIMEOUT_S, help="--proposer exchange: seconds to wait for the answers of "
                                           "one step before counting them as timed out."),
    repairs: int = typer.Option(1, help="Repairs in a row a failed candidate of a model (llm, exchange) gets: a "
                                "request with its reasons and log (0: none; the expert does not repair)."),
    llm_api: str = typer.Option("openai", help="--proposer llm: openai (any OpenAI-compatible server) or anthropic."),
    llm_model: Optional[str] = typer.Option(None, help="--proposer llm: the model name."),
    llm_base_url: Optional[str] = typer.Option(None, help="--proposer llm: server URL, e.g. http://localhost:8000/v1."),
    llm_key_env: Optional[str] = typer.Option(None, help="--proposer llm: NAME of the variable holding the API key."),
    roles: str = typer.Option("", help="Roles a model plays besides coder and repairer, comma-separated: analyst "
                              "(picks each step's move from the verdict and profile), reviewer (explains every "
                              "candidate the judge found suspicious)."),
    llm_role_model: Optional[List[str]] = typer.Option(None, help="ROLE=MODEL: another model for one role (coder, "
                                                       "repairer, analyst, reviewer) on the same server; repeat "
                                                       "it per role."),
    hybrid_expert_steps: int = typer.Option(2, help="--proposer hybrid: steps the expert expands before the model "
                                            "takes over."),
    llm_tool_rounds: Optional[int] = typer.Option(None, help="--proposer llm: replies per proposal that may call the "
                                                  "CUTLASS code-search tools (default 4; 0: offer no tools)."),
    out: Optional[Path] = typer.Option(None, help="Where to write the best ModelNew (default: in the run folder)."),
    resume: Optional[str] = typer.Option(None, help="Resume run ID: replays its events, judges nothing twice."),
    time_limit: Optional[float] = typer.Option(None, help="Seconds after which no new step starts (the one under "
                                               "way finishes); the run stays resumable with --resume."),
    executor: str = EXECUTOR,
    workers: Optional[str] = WORKERS,
    ray_address: Optional[str] = RAY_ADDRESS,
    kernelbench: Optional[str] = KERNELBENCH,
    device: Optional[str] = DEVICE,
    runs_dir: Optional[str] = RUNS,
    config: Optional[Path] = CONFIG,
    overrides: Optional[List[str]] = SET,
    as_json: bool = JSON,
) -> None:
    """Search for faster kernels: propose, judge, keep the best, write it as a standalone ModelNew."""
    from loopwise.kernels.optimize import Settings, run_optimize

    if resume is None and problem is None:
        raise UserError("give a PROBLEM, or --resume RUN_ID")
    if time_limit is not None and not time_limit > 0:
        raise UserError(f"--time-limit {time_limit:g}: expected a number of seconds above 0")
    cfg = command_config(config, overrides, where(device, kernelbench, runs_dir), (resume, "kernels.optimize"))
    llm = {**cfg.llm, **{k: v for k, v in {"api": llm_api, "model": llm_model, "base_url": llm_base_url,
                                           "api_key_env": llm_key_env}.items() if v}}
    if llm_tool_rounds is not None:
        llm["max_tool_rounds"] = llm_tool_rounds
    if proposer == "llm" and not llm.get("model"):
        raise UserError("--proposer llm needs --llm-model (and --llm-base-url for a local server)")
    if problem and not problem.startswith("kernelbench:") and Path(problem).is_file():
        problem = str(Path(problem).resolve())  # a resume from another folder finds it
    from loopwise.core.propose.roles import parse_role_models, parse_roles

    role_names = list(parse_roles(roles))
    settings = Settings(problem=problem or "", proposer=proposer, search=search, budget=budget, objective=objective,
                        seed=seed, per_step=per_step, exchange_dir=exchange_dir or "", llm=llm,
                        profiling=profiling, profile_within=profile_within, exchange_timeout=exchange_timeout,
                        repairs=repairs, roles=role_names,
                        role_models=parse_role_models(llm_role_model or [], enabled=role_names),
                        hybrid_expert_steps=hybrid_expert_steps)
    raise typer.Exit(run_optimize(settings, cfg, resume=resume, out=out, as_json=as_json,
                                  executor=(executor, workers, ray_address), time_limit=time_limit))


def bench_cmd(
    suite: str = typer.Argument("kernelbench", help="The benchmark: kernelbench (a KernelBench checkout)."),
    levels: str = typer.Option("1,2,3", help="Levels, comma-separated."),
    subset: str = typer.Option("all", help="Which problems of each level: all, first:N, every:K (ids 1, 1+K, ...) "
                               "or ids:L/I,L/I."),
    order: str = typer.Option("id", help="The order problems run in: id (level, then id) or shuffled:SEED (one "
                              "seeded random order, so a bench stopped early has finished a uniform sample)."),
    budget: int = typer.Option(8, help="Candidates judged per problem."),
    search: str = typer.Option("mcts", help="mcts, greedy, beam, random or best-of-n."),
    seed: int = typer.Option(0, help="Seed of every search."),
    per_step: int = typer.Option(2, help="Proposals asked for at each expansion."),
    compile_baseline: bool = typer.Option(True, "--compile/--no-compile", help="Also time torch.compile "
                                          "per problem (the second denominator)."),
    resume: Optional[str] = typer.Option(None, help="Resume bench run ID: finished problems are kept, unfinished "
                                         "searches resume."),
    executor: str = EXECUTOR,
    workers: Optional[str] = WORKERS,
    ray_address: Optional[str] = RAY_ADDRESS,
    kernelbench: Optional[str] = KERNELBENCH,
    device: Optional[str] = DEVICE,
    runs_dir: Optional[str] = RUNS,
    config: Optional[Path] = CONFIG,
    overrides: Optional[List[str]] = SET,
    as_json: bool = JSON,
) -> None:
    """Many problems at once, one search each (expert proposer): the table per level against eager and
    torch.compile (geomean, fast_p) and an HTML report."""
    from loopwise.kernels.bench.console import run_bench

    if suite != "kernelbench":
        raise UserError(f"unknown suite {suite!r}: kernelbench is the one there is")
    try:
        level_list = [int(x) for x in levels.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--levels {levels!r}: expected numbers such as 1,2,3") from None
    from loopwise.kernels.bench.run import BenchSettings

    settings = BenchSettings(levels=level_list, subset=subset, order=order, budget=budget, search=search, seed=seed,
                             per_step=per_step, compile=compile_baseline)
    cfg = command_config(config, overrides, where(device, kernelbench, runs_dir), resume=(resume, "kernels.bench"))
    raise typer.Exit(run_bench(settings, cfg, resume=resume, as_json=as_json,
                               executor=(executor, workers, ray_address)))


def generate_cmd(
    out: Path = typer.Option(..., "--out", help="Folder to write level1/ (single ops) and level2/ (chains) into."),
    count: int = typer.Option(200, "--count", help="Problems to write."),
    seed: int = typer.Option(0, "--seed", help="The suite: a seed gives the same files on every machine."),
    scale: float = typer.Option(1.0, "--scale", help="Multiplies every tensor's size (1: a GPU workload of MBs to "
                                "hundreds of MBs; 0.0005: tiny, for a CPU)."),
    as_json: bool = JSON,
) -> None:
    """Write a generated suite of KernelBench-format problems (1-6 ops from a typed grammar of PyTorch
    operations); bench it with `loopwise kernels bench --kernelbench OUT --levels 1,2`."""
    from loopwise.kernels.generate import write_suite

    if count < 1 or scale <= 0:
        raise UserError("--count must be at least 1 and --scale above 0")
    paths = write_suite(out, count, seed, scale)
    if as_json:
        typer.echo(json.dumps({"out": str(out), "seed": seed, "scale": scale, "problems": [str(p) for p in paths]},
                              indent=2))
        return
    singles = sum(1 for p in paths if p.parent.name == "level1")
    typer.echo(f"wrote {len(paths)} problems of seed {seed} to {out} ({singles} single ops in level1/, "
               f"{len(paths) - singles} chains in level2/)")
