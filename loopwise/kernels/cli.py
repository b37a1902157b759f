"""``loopwise kernels ...``: eval, check, baseline, optimize, bench, generate, profile, tools, sass, codesearch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from loopwise.errors import CandidateError, UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

JSON = typer.Option(False, "--json", help="Print machine-readable JSON on stdout instead of tables.")
CONFIG = typer.Option(None, "--config", "-c", help="YAML config file.")
SET = typer.Option(None, "--set", help="Override a config value, e.g. --set kernels.eval.perf_trials=50.")
KERNELBENCH = typer.Option(None, "--kernelbench", help="KernelBench checkout for kernelbench:LEVEL/ID "
                           "(default: $LOOPWISE_KERNELBENCH or ./third_party/KernelBench).")
DEVICE = typer.Option(None, "--device", help="auto, cuda, cuda:N or cpu.")
EXECUTOR = typer.Option("local", "--executor", help="Where candidates are judged: local (this machine) or ray "
                        "(a Ray cluster; pip install 'loopwise\\[ray]').")
WORKERS = typer.Option(None, "--workers", help="Judge on worker processes, one per GPU: a count (2), GPU "
                       "indices (0,1) or CPU stand-ins (cpu,cpu). Default: local judges in this process on "
                       "--device; ray uses every GPU of the cluster.")
RUNS = typer.Option(None, "--runs-dir", help="Where runs are kept (default: ./runs, or store.runs_dir of --config).")
RAY_ADDRESS = typer.Option(None, "--ray-address", help="An existing Ray cluster (e.g. auto or ray://host:10001); "
                           "default: a local one started on demand.")


def _config(config: Optional[Path], overrides: Optional[List[str]], extra: list[str],
            resume: tuple[str, str] | None = None):
    """The config of this command; with ``resume`` (a run id and its kind), the config that run
    stored, with this command's --config, --set and options laid over it."""
    from loopwise.config import load_config, run_config

    cfg = load_config(config, list(overrides or []) + extra)
    if resume and resume[0]:
        cfg = run_config(cfg.store.runs_dir, resume[0], resume[1], config, list(overrides or []) + extra)
    return cfg


def _where(device: Optional[str], kernelbench: Optional[str], runs_dir: Optional[str] = None) -> list[str]:
    out = [f"kernels.device={device}"] if device else []
    out += [f"store.runs_dir={runs_dir}"] if runs_dir else []
    return out + ([f"kernels.kernelbench={kernelbench}"] if kernelbench else [])


def _read_candidate(path: Path) -> str:
    if not path.is_file():
        raise CandidateError(f"{path}: candidate file not found")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CandidateError(f"{path}: not a UTF-8 text file") from None


@app.command("eval")
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
    from loopwise.kernels.run_eval import evaluate_candidates

    extra = []
    for key, value in (("tolerance", tolerance), ("precision", precision), ("correct_trials", trials),
                       ("perf_trials", perf_trials)):
        if value is not None:
            extra.append(f"kernels.eval.{key}={value}")
    if no_static:
        extra.append("kernels.eval.static_check=false")
    cfg = _config(config, overrides, extra + _where(device, kernelbench, runs_dir), (resume, "kernels.eval"))
    sources = [(str(p), _read_candidate(p)) for p in candidates]
    code = evaluate_candidates(problem, sources, cfg, as_json=as_json, resume=resume)
    raise typer.Exit(code)


@app.command("check")
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
    from loopwise.kernels.report import print_check

    if policy not in ("fp32", "relaxed"):
        raise UserError(f"--policy {policy!r}: expected fp32 or relaxed")
    if problem:
        from loopwise.kernels.evaluate.judge import static_policy
        from loopwise.kernels.problem import load_problem

        policy = static_policy(load_problem(problem, kernelbench), policy)
    results = [(str(p), scan(_read_candidate(p), policy=policy, filename=str(p))) for p in candidates]
    rejected = any(any(r.severity == "reject" for r in reasons) for _, reasons in results)
    if as_json:
        typer.echo(json.dumps([{"candidate": name, "rejected": any(r.severity == "reject" for r in reasons),
                                "reasons": [r.model_dump() for r in reasons]} for name, reasons in results],
                              indent=2))
    else:
        print_check(results, policy)
    raise typer.Exit(1 if rejected else 0)


@app.command("baseline")
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
    from loopwise.kernels.run_eval import baseline_problems

    extra = []
    if max_autotune:
        extra.append("kernels.baseline.max_autotune=true")
    if no_compile:
        extra.append("kernels.baseline.compile=false")
    if tf32:
        extra.append("kernels.baseline.tf32=true")
    if no_cache:
        extra.append("kernels.baseline.cache=false")
    baseline_problems(problems, _config(config, overrides, extra + _where(device, kernelbench)), as_json=as_json)


@app.command("optimize")
def optimize_cmd(
    problem: Optional[str] = typer.Argument(None, help="Problem file or kernelbench:LEVEL/ID (not with --resume)."),
    proposer: str = typer.Option("expert", help="expert (no LLM), llm or exchange."),
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
    exchange_timeout: float = typer.Option(3600.0, help="--proposer exchange: seconds to wait for the answers of "
                                           "one step before counting them as timed out."),
    repairs: int = typer.Option(1, help="Repairs in a row a failed candidate of a model (llm, exchange) gets: a "
                                "request with its reasons and log (0: none; the expert does not repair)."),
    llm_api: str = typer.Option("openai", help="--proposer llm: openai (any OpenAI-compatible server) or anthropic."),
    llm_model: Optional[str] = typer.Option(None, help="--proposer llm: the model name."),
    llm_base_url: Optional[str] = typer.Option(None, help="--proposer llm: server URL, e.g. http://localhost:8000/v1."),
    llm_key_env: Optional[str] = typer.Option(None, help="--proposer llm: NAME of the variable holding the API key."),
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
    from loopwise.kernels.optimize import Settings
    from loopwise.kernels.optimize_cli import run_optimize

    if resume is None and problem is None:
        raise UserError("give a PROBLEM, or --resume RUN_ID")
    if time_limit is not None and not time_limit > 0:
        raise UserError(f"--time-limit {time_limit:g}: expected a number of seconds above 0")
    cfg = _config(config, overrides, _where(device, kernelbench, runs_dir), (resume, "kernels.optimize"))
    llm = {**cfg.llm, **{k: v for k, v in {"api": llm_api, "model": llm_model, "base_url": llm_base_url,
                                           "api_key_env": llm_key_env}.items() if v}}
    if llm_tool_rounds is not None:
        llm["max_tool_rounds"] = llm_tool_rounds
    if proposer == "llm" and not llm.get("model"):
        raise UserError("--proposer llm needs --llm-model (and --llm-base-url for a local server)")
    if problem and not problem.startswith("kernelbench:") and Path(problem).is_file():
        problem = str(Path(problem).resolve())  # a resume from another folder finds it
    settings = Settings(problem=problem or "", proposer=proposer, search=search, budget=budget, objective=objective,
                        seed=seed, per_step=per_step, exchange_dir=exchange_dir or "", llm=llm,
                        profiling=profiling, profile_within=profile_within, exchange_timeout=exchange_timeout,
                        repairs=repairs)
    raise typer.Exit(run_optimize(settings, cfg, resume=resume, out=out, as_json=as_json,
                                  executor=(executor, workers, ray_address), time_limit=time_limit))


@app.command("bench")
def bench_cmd(
    suite: str = typer.Argument("kernelbench", help="The benchmark: kernelbench (a KernelBench checkout)."),
    levels: str = typer.Option("1,2,3", help="Levels, comma-separated."),
    subset: str = typer.Option("all", help="Which problems of each level: all, first:N, every:K (ids 1, 1+K, ...) "
                               "or ids:L/I,L/I."),
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
    from loopwise.kernels.bench_cli import run_bench

    if suite != "kernelbench":
        raise UserError(f"unknown suite {suite!r}: kernelbench is the one there is")
    try:
        level_list = [int(x) for x in levels.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--levels {levels!r}: expected numbers such as 1,2,3") from None
    from loopwise.kernels.bench import BenchSettings

    settings = BenchSettings(levels=level_list, subset=subset, budget=budget, search=search, seed=seed,
                             per_step=per_step, compile=compile_baseline)
    cfg = _config(config, overrides, _where(device, kernelbench, runs_dir), resume=(resume, "kernels.bench"))
    raise typer.Exit(run_bench(settings, cfg, resume=resume, as_json=as_json,
                               executor=(executor, workers, ray_address)))


@app.command("generate")
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


@app.command("profile")
def profile_cmd(
    problem: Optional[str] = typer.Argument(None, help="Problem file or kernelbench:LEVEL/ID (not with --from)."),
    candidate: Optional[Path] = typer.Argument(None, help="Candidate defining ModelNew (default: the reference Model)."),
    mode: str = typer.Option("proactive", help="Which tools run: proactive (chosen by the roofline class), "
                             "all, or raw (measurements only)."),
    ncu: str = typer.Option("auto", help="Nsight Compute: auto (when found), on (required) or off."),
    ncu_set: str = typer.Option("full", "--ncu-set", help="ncu section set (full, detailed, basic)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the trace, ncu CSV, roofline PNG and "
                                       "profile.json (default: ./loopwise-profile/<problem>)."),
    from_dir: Optional[Path] = typer.Option(None, "--from", help="Analyze a profile folder again (written by "
                                            "an earlier profile, on any machine; no GPU needed), e.g. in "
                                            "another --mode."),
    kernelbench: Optional[str] = KERNELBENCH,
    device: Optional[str] = DEVICE,
    config: Optional[Path] = CONFIG,
    overrides: Optional[List[str]] = SET,
    as_json: bool = JSON,
) -> None:
    """Profile a candidate: system trace, SASS, Nsight Compute metrics, each kernel's roofline class,
    and the guidance of the micro-profiling tools that class selects."""
    from loopwise.kernels.device import resolve_device
    from loopwise.kernels.problem import load_problem
    from loopwise.kernels.profile.registry import MODES
    from loopwise.kernels.profile.run import analyze, profile

    if mode not in MODES:
        raise UserError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    if from_dir is not None:
        if problem is not None or candidate is not None:
            raise UserError("--from re-reads a profile folder: give no PROBLEM or CANDIDATE with it")
        if not from_dir.is_dir():
            raise UserError(f"--from {from_dir}: not a folder")
        report = analyze(from_dir, mode=mode)
    else:
        if problem is None:
            raise UserError("give a PROBLEM (and optionally a CANDIDATE), or --from FOLDER")
        if ncu not in ("auto", "on", "off"):
            raise UserError(f"--ncu {ncu!r}: expected auto, on or off")
        if candidate is not None:
            _read_candidate(candidate)
        cfg = _config(config, overrides, _where(device, kernelbench))
        prob = load_problem(problem, cfg.kernels.kernelbench)
        folder = out or Path("loopwise-profile") / Path(prob.name).name
        report = profile(prob, candidate.resolve() if candidate else None, folder,
                         device=resolve_device(cfg.kernels.device), mode=mode, ncu=ncu, ncu_set=ncu_set,
                         precision=cfg.kernels.eval.precision)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    _print_profile(report)


def _print_profile(report) -> None:
    from loopwise.core.console import console as make_console
    from rich.table import Table

    console = make_console()
    console.print(f"[bold]{report.problem}[/] · {report.candidate} on {report.device} · tools: {report.mode}")
    if report.trace_headline:
        console.print(f"system: {report.trace_headline}")
    table = Table(show_lines=False)
    for col in ("kernel", "us", "class", "% of SOL", "DRAM MB", "GFLOP", "regs", "tensor core"):
        table.add_column(col, overflow="fold")
    for k in report.kernels:
        table.add_row(k.name[:60], f"{k.duration_us:.1f}" if k.duration_us else "-",
                      (k.kernel_class or "-").replace("_", " ") + (" (at roofline)" if k.at_roofline else ""),
                      f"{100 * k.fraction_of_sol:.0f}" if k.fraction_of_sol is not None else "-",
                      f"{k.dram_mb:.1f}" if k.dram_mb is not None else "-",
                      f"{k.gflop:.2f}" if k.gflop is not None else "-",
                      str(k.registers or "-"), k.tensor_core or "-")
    console.print(table)
    if report.findings:
        console.print("[bold]findings[/] (highest first):")
        for f in report.findings[:12]:
            moves = ", ".join(m if isinstance(m, str) else json.dumps(m) for m in (move.to_json() for move in f.moves))
            console.print(f"  [{f.severity}] {f.tool}: {f.guidance}" + (f"  → try: {moves}" if moves else ""))
    else:
        console.print("no findings" + (" (raw mode)" if report.mode == "raw" else ""))
    for note in report.notes:
        console.print(f"[dim]note: {note}[/]")
    costs = ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in report.costs_s.items())
    console.print(f"[dim]cost: {costs}; files: {', '.join(report.artifacts.values())}[/]")


@app.command("tools")
def tools_cmd(as_json: bool = JSON) -> None:
    """The installed micro-profiling tools: what each reads and for which roofline classes it runs."""
    from loopwise.core.console import console as make_console
    from rich.table import Table

    from loopwise.kernels.profile.registry import load_tools

    tools = load_tools()
    rows = [{"name": t.name, "needs": sorted(t.needs), "runs_for": sorted(t.applies_to), "summary": t.summary,
             "module": type(t).__module__} for t in tools]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} micro-profiling tools (entry-point group loopwise.kernels.tools)")
    for col in ("tool", "reads", "runs for (proactive mode)", "looks for"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], ", ".join(r["needs"]), ", ".join(r["runs_for"]), r["summary"])
    make_console().print(table)


@app.command("sass")
def sass_cmd(
    binaries: List[Path] = typer.Argument(..., help="cubin (or a fatbin / .so holding one) built for the GPU."),
    kernel: Optional[str] = typer.Option(None, "--kernel", help="Only kernels whose name contains this."),
    policy: str = typer.Option("fp32", help="Precision policy: fp32 or relaxed."),
    matmul: bool = typer.Option(False, "--matmul", help="The kernel computes a matrix product."),
    grid: Optional[int] = typer.Option(None, "--grid", help="Thread blocks in the launch grid, if known."),
    warps: Optional[int] = typer.Option(None, "--warps", help="Warps per block, if known."),
    shared: Optional[int] = typer.Option(None, "--shared", help="Dynamic shared memory per block in bytes, "
                                         "if known (Triton sets it at launch: the compiled kernel's metadata.shared)."),
    as_json: bool = JSON,
) -> None:
    """Static SASS profile of compiled kernels (no GPU needed) and the findings of the tools that
    read SASS alone: instruction mix, tensor-core path, access widths, spills, occupancy."""
    from loopwise.kernels.profile.findings import LaunchConfig, ProblemHints, ToolInput
    from loopwise.kernels.profile.registry import load_tools
    from loopwise.kernels.profile.sass_tools import DisassemblyError, ToolNotFoundError, profile_cubin

    if policy not in ("fp32", "relaxed"):
        raise UserError(f"--policy {policy!r}: expected fp32 or relaxed")
    static = [t for t in load_tools() if set(t.needs) <= {"sass", "launch"}]
    launch = LaunchConfig(grid_blocks=grid, num_warps=warps) if (grid or warps) else None
    out = []
    for path in binaries:
        if not path.is_file():
            raise UserError(f"{path}: file not found")
        try:
            prof = profile_cubin(path)
        except ToolNotFoundError as exc:
            raise UserError(str(exc)) from None
        except DisassemblyError as exc:
            raise UserError(f"{path}: {exc}") from None
        for k in prof.kernels:
            if kernel and kernel not in k.name:
                continue
            if shared is not None and k.resources is not None:
                k = k.model_copy(update={"resources": k.resources.model_copy(update={"dynamic_shared_bytes": shared})})
            inp = ToolInput(sass=k, launch=launch, hints=ProblemHints(matmul_shaped=matmul, precision=policy))
            findings = sorted((f for t in static for f in t.run(inp)), key=lambda f: (-f.score, f.tool))
            out.append({"binary": str(path), "arch": prof.arch, "kernel": k.model_dump(mode="json"),
                        "shared_bytes": k.resources.shared_bytes if k.resources else None,
                        "findings": [f.model_dump(mode="json") for f in findings]})
    if not out:
        raise UserError("no kernel found" + (f" whose name contains {kernel!r}" if kernel else ""))
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    _print_sass(out)


def _print_sass(out: list[dict]) -> None:
    from loopwise.core.console import console as make_console
    from rich.table import Table

    console = make_console()
    for item in out:
        k = item["kernel"]
        res = k.get("resources") or {}
        console.print(f"[bold]{k['name']}[/bold]  ({item['binary']}, {item['arch'] or 'arch unknown'}): "
                      f"{k['instructions']} instructions, {res.get('registers', '?')} registers, "
                      + (f"{item['shared_bytes']} B shared per block" if item["shared_bytes"] is not None
                         else "shared memory per block unknown (pass --shared)"))
        mix = sorted(k["families"].items(), key=lambda kv: -kv[1])[:8]
        console.print("  mix: " + ", ".join(f"{name} {n}" for name, n in mix))
        if k.get("tensor_core"):
            console.print("  tensor core: " + ", ".join(f"{op['opcode']} x{op['count']}" for op in k["tensor_core"]))
        table = Table(show_header=True)
        for col in ("tool", "severity", "guidance"):
            table.add_column(col)
        for f in item["findings"]:
            table.add_row(f["tool"], f["severity"], f["guidance"])
        if item["findings"]:
            console.print(table)
        else:
            console.print("  no finding from the SASS tools")


@app.command("codesearch")
def codesearch_cmd(
    query: str = typer.Argument(..., help="Names or words, e.g. SM90_TMA_LOAD, make_tiled_copy, 'TMA warp specialized'."),
    limit: int = typer.Option(10, "--limit", "-n", help="Most hits to show (1-50)."),
    root: Optional[Path] = typer.Option(None, "--root", help="A CUTLASS checkout (with include/ and examples/); "
                                        "default: $LOOPWISE_CUTLASS_ROOT, else the nvidia-cutlass wheel's sources."),
    as_json: bool = JSON,
) -> None:
    """Search the CUTLASS / CuTe C++ sources and examples: names by their parts, defining code first.
    The first search builds an index (seconds), cached until the sources change."""
    from dataclasses import asdict

    from loopwise.kernels.codesearch import ensure_index, resolve_root, search

    source = resolve_root(root)
    if as_json:
        hits = search(query, limit=limit, root=source)
        typer.echo(json.dumps({"query": query, "root": str(source), "hits": [asdict(h) for h in hits]}, indent=2))
        return
    from loopwise.core.console import console as make_console

    console = make_console()
    with console.status(f"indexing {source} (once, until the sources change)"):
        info = ensure_index(source)
    _print_hits(console, query, search(query, limit=limit, root=source), info)


def _print_hits(console, query: str, hits, info) -> None:
    import textwrap

    from rich.table import Table

    how = "reused" if info.reused else f"built in {info.build_s:.1f} s"
    table = Table(title=f"{len(hits)} hits for {query!r} in {info.root} ({info.chunks} chunks, index {how})",
                  show_lines=True)
    for col in ("where", "defines", "snippet"):
        table.add_column(col, overflow="fold")
    for h in hits:
        lines = [line for line in textwrap.dedent(h.snippet).split("\n") if any(c.isalnum() for c in line)][:3]
        table.add_row(f"{h.path}:{h.start_line}-{h.end_line}", ", ".join(h.symbols[:4]) or "-",
                      "\n".join(line[:100] for line in lines))
    console.print(table)
    if not hits:
        console.print("no match: try fewer words, or parts of a name")
