"""``loopwise kernels profile``, ``tools`` and ``sass``: where a candidate's time goes, and the tools
that read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from loopwise.errors import UserError
from loopwise.kernels.cli.options import CONFIG, DEVICE, JSON, KERNELBENCH, SET, command_config, read_candidate, where


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
            read_candidate(candidate)
        cfg = command_config(config, overrides, where(device, kernelbench))
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
    from loopwise.kernels.profile.guidance import FINDINGS_SHOWN, finding_line
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
        for f in report.findings[:FINDINGS_SHOWN]:
            console.print(f"  {finding_line(f)}")
    else:
        console.print("no findings" + (" (raw mode)" if report.mode == "raw" else ""))
    for note in report.notes:
        console.print(f"[dim]note: {note}[/]")
    costs = ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in report.costs_s.items())
    console.print(f"[dim]cost: {costs}; files: {', '.join(report.artifacts.values())}[/]")


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
