"""``loopwise kernels profile``: one candidate (or the reference) through every profiler we have, its
kernels placed on the roofline, and the findings of the tools the roofline class selects.

Order of work, each step optional when its tool is missing (the report says what was skipped):

1. the system level: the candidate runs in a child process (:mod:`.target`) whose one profiled
   call is traced with torch.profiler; Triton's cache folder is private to the run, so the cubin of
   every kernel it compiled is at hand;
2. the instruction level: SASS of those cubins and of the C++/CUDA extensions the candidate
   loaded (cuobjdump / nvdisasm from CUDA or Triton's bundle);
3. the kernel level: the same child again under Nsight Compute, restricted to the NVTX range
   around the profiled call (``--csv --page raw``, clocks left alone);
4. classification of each measured kernel against the device's measured ceilings, the tools
   (:func:`~loopwise.kernels.profile.registry.diagnose`) in the chosen mode, and a roofline plot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from loopwise.errors import UserError
from loopwise.kernels.evaluate.environment import sandbox_environ
from loopwise.kernels.profile.findings import Finding, LaunchConfig, ProblemHints, ToolInput
from loopwise.kernels.profile.folder import folder_ceilings, folder_hints, folder_sass, read_manifest
from loopwise.kernels.profile.launches import launch_summaries, names_match
from loopwise.kernels.profile.registry import Mode, diagnose
from loopwise.kernels.profile.roofline_plot import roofline_png
from loopwise.kernels.profile.target import NVTX_RANGE

__all__ = ["KernelReport", "ProfileReport", "find_ncu", "profile"]

NcuChoice = Literal["auto", "on", "off"]
TARGET = "loopwise.kernels.profile.target"


class KernelReport(BaseModel):
    """One kernel of the profiled call, with everything measured about it and the tools' findings."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    launches: int = 1
    duration_us: float | None = None  # ncu's, else the trace's
    dram_mb: float | None = None
    gflop: float | None = None
    kernel_class: str | None = None
    fraction_of_sol: float | None = None
    at_roofline: bool | None = None
    arithmetic_intensity: float | None = None
    achieved_gbs: float | None = None
    achieved_tflops: float | None = None
    explanation: str | None = None
    registers: int | None = None
    spills: bool | None = None
    tensor_core: str | None = None
    findings: list[Finding] = []


class ProfileReport(BaseModel):
    """What ``loopwise kernels profile`` found."""

    problem: str
    candidate: str
    device: str
    mode: str
    kernels: list[KernelReport]
    findings: list[Finding]  # every kernel's, deduplicated, highest score first
    trace_headline: str | None = None
    gpu_busy_us: float | None = None
    gpu_span_us: float | None = None
    costs_s: dict[str, float]
    notes: list[str]
    artifacts: dict[str, str]

    def top_finding(self) -> Finding | None:
        """The highest-ranked finding worth acting on (severity ``low`` or above): ``None`` when
        only informational ones remain, i.e. nothing worth fixing was found."""
        return next((f for f in self.findings if f.severity != "info"), None)


def find_ncu() -> str | None:
    """The Nsight Compute CLI: on PATH, else in the usual CUDA install folders."""
    found = shutil.which("ncu")
    if found:
        return found
    for folder in (os.environ.get("CUDA_HOME"), "/usr/local/cuda", "/opt/nvidia/nsight-compute"):
        if folder:
            for candidate in (Path(folder) / "bin" / "ncu", Path(folder) / "ncu"):
                if candidate.is_file() and os.access(candidate, os.X_OK):
                    return str(candidate)
    return None


def _target_argv(problem_file: Path, candidate: Path | None, device: str, out: Path, trace: bool) -> list[str]:
    argv = [sys.executable, "-m", TARGET, "--problem", str(problem_file), "--device", device, "--out", str(out)]
    if candidate is not None:
        argv += ["--candidate", str(candidate)]
    if trace:
        argv.append("--trace")
    return argv


def _run(argv: list[str], env: dict, timeout: float, out: Path, what: str) -> dict:
    """Runs one child; returns the manifest the target wrote, or raises UserError with its fault."""
    log = out.parent / f"{out.name}.log"
    try:
        with open(log, "w", encoding="utf-8") as fh:
            proc = subprocess.run(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(f"{what} did not finish in {timeout:.0f} s (log: {log})") from None
    except OSError as exc:
        raise UserError(f"{what} could not start: {exc}") from None
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    if proc.returncode != 0 or not manifest.get("ok"):
        fault = manifest.get("error") or _last_line(log) or f"exit status {proc.returncode}"
        raise UserError(f"{what} failed: {fault} (log: {log})")
    return manifest


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def profile(problem, candidate: Path | None, out_dir: Path, *, device: str = "cuda", mode: Mode = "proactive",
            ncu: NcuChoice = "auto", ncu_set: str = "full", precision: str = "fp32",
            timeout_s: float = 600.0, trace: bool = True, also: tuple[str, ...] = ()) -> ProfileReport:
    """Profiles ``candidate`` (a file defining ``ModelNew``; ``None``: the reference ``Model``) on
    ``problem`` (a loaded :class:`~loopwise.kernels.problem.Problem`). Artifacts go to ``out_dir``,
    which :func:`analyze` can read again later, on any machine.

    ``trace=False`` (the search loop) skips the system-level run when Nsight Compute runs: one child
    process instead of two (the traced run is about half a profile's time: docs/log/2026-11-30.md). The kernels
    then come from ncu, without the host gaps between them (the launch-bound tool estimates them).
    ``also`` names tools to run besides those ``mode`` selects (the ones an analyst asked for).

    Raises:
        UserError: the candidate failed to run, or ncu was required and is missing.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    problem_file = out_dir / "problem.py"
    problem_file.write_text(problem.source, encoding="utf-8")
    env = sandbox_environ()  # the candidate runs in these children: no secret in their environment
    env["TRITON_CACHE_DIR"] = str(out_dir / "triton")
    costs: dict[str, float] = {}
    notes: list[str] = []
    cuda = device.startswith("cuda")

    ncu_path = find_ncu() if ncu != "off" else None
    if ncu == "on" and ncu_path is None:
        raise UserError("ncu (Nsight Compute) not found on PATH or under /usr/local/cuda/bin; "
                        "install it or pass --ncu off")
    run_ncu = bool(ncu_path and (cuda or ncu == "on"))

    # 1. system level (the trace), which also compiles every kernel into out_dir/triton
    manifest: dict = {}
    if trace or not run_ncu:
        t0 = time.perf_counter()
        manifest = _run(_target_argv(problem_file, candidate, device, out_dir / "run", trace=True), env, timeout_s,
                        out_dir / "run", "the candidate" if candidate else "the reference")
        costs["run_s"] = time.perf_counter() - t0

    # 3. kernel level (2, the SASS, is read from the files by analyze)
    if run_ncu:
        from loopwise.kernels.profile.ncu import ncu_command

        argv = ncu_command(_target_argv(problem_file, candidate, device, out_dir / "ncu_run", trace=False), ".*",
                           out_dir / "ncu.csv", section_set=ncu_set, ncu=ncu_path, nvtx_range=NVTX_RANGE)
        t0 = time.perf_counter()
        under_ncu = _run(argv, env, timeout_s, out_dir / "ncu_run", "the candidate under ncu")
        costs["ncu_s"] = time.perf_counter() - t0
        manifest = manifest or under_ncu
    elif ncu != "off":
        notes.append("ncu skipped: " + ("no CUDA device" if not cuda else "Nsight Compute not found"))
    if cuda or "ncu_s" in costs:  # the roof the kernels are held to travels with the profile
        from loopwise.kernels.roofline.ceilings import load_or_measure

        (out_dir / "ceilings.json").write_text(load_or_measure(device).model_dump_json(indent=1))
    if not cuda and not list((out_dir / "triton").rglob("*.cubin")):
        notes.append("no compiled kernels on this device (Triton interprets on the CPU): no SASS")
    hints = _hints(problem, precision)
    if candidate is not None and COMPENSATED.search(Path(candidate).read_text(errors="replace")):
        hints = hints.model_copy(update={"compensated": True})
    (out_dir / "hints.json").write_text(hints.model_dump_json(indent=1))
    return analyze(out_dir, mode=mode, also=also, hints=hints, problem_name=problem.name,
                   candidate=str(candidate) if candidate else "reference",
                   device=manifest.get("device_name") or device, costs=costs, notes=notes)


def analyze(folder: Path, *, mode: Mode = "proactive", hints: ProblemHints | None = None, problem_name: str = "",
            candidate: str = "", device: str = "", costs: dict | None = None, notes: list | None = None,
            write: bool = True, also: tuple[str, ...] = ()) -> ProfileReport:
    """The report of a profile folder: what :func:`profile` left there, or a recorded fixture
    (``ncu.csv``, ``trace.json``, ``*.cubin`` with Triton's ``*.json``, ``*.sass.txt``,
    ``ceilings.json``, ``manifest.json``, ``hints.json``). Needs no GPU: the device's ceilings and SM count are read
    from the folder. Writes ``roofline.png`` and ``profile.json`` there unless ``write`` is false."""
    folder = Path(folder)
    costs, notes, artifacts = dict(costs or {}), list(notes or []), {}
    manifest = read_manifest(folder)
    hints = folder_hints(folder, hints, notes)

    traced = None
    trace_path = next((p for p in (folder / "run" / "trace.json", folder / "trace.json") if p.is_file()), None)
    if trace_path is not None:
        from loopwise.kernels.profile.trace import TraceError, read_trace

        try:
            traced = read_trace(trace_path)
            artifacts["trace"] = str(trace_path)
        except TraceError as exc:
            notes.append(f"trace unreadable: {exc}")

    t0 = time.perf_counter()
    sass_kernels = folder_sass(folder, manifest, notes)
    if sass_kernels:
        costs.setdefault("sass_s", time.perf_counter() - t0)

    measured = []
    csv_path = folder / "ncu.csv"
    if csv_path.is_file():
        from loopwise.kernels.profile.ncu import NcuParseError, derive, parse_raw_csv

        try:
            measured = [derive(launch) for launch in parse_raw_csv(csv_path.read_text(errors="replace"))]
            artifacts["ncu_csv"] = str(csv_path)
        except NcuParseError as exc:
            notes.append(f"ncu output unreadable: {exc}")
        if not measured:
            notes.append("ncu profiled no kernel inside the call (is the work done on the host?)")

    classifications, ceilings = {}, None
    if measured:
        ceilings = folder_ceilings(folder, device)
        if ceilings is None:
            notes.append("no ceilings.json and no CUDA device to measure them: kernels not classified")
        else:
            from loopwise.kernels.profile.classify import classify, sample_from_ncu

            sms = manifest.get("sms")
            for m in measured:
                if m.duration_s:
                    classifications.setdefault(m.name, classify(sample_from_ncu(m), ceilings, sms))
    summaries = launch_summaries(traced, measured, classifications)
    kernels = _kernel_reports(measured, classifications, sass_kernels, traced, summaries, hints, mode, also)
    seen, findings = set(), []
    for k in kernels:
        for f in k.findings:
            if (f.tool, f.guidance) not in seen:
                seen.add((f.tool, f.guidance))
                findings.append(f)
    findings.sort(key=lambda f: (-f.score, f.tool))
    report = ProfileReport(problem=problem_name or manifest.get("problem", ""), candidate=candidate or
                           (manifest.get("candidate") or "reference"), device=device or manifest.get("device_name", ""),
                           mode=mode, kernels=kernels, findings=findings,
                           trace_headline=traced.headline() if traced else None,
                           gpu_busy_us=traced.gpu_busy_us if traced else None,
                           gpu_span_us=traced.gpu_span_us if traced else None,
                           costs_s={k: round(v, 3) for k, v in costs.items()}, notes=notes, artifacts=artifacts)
    if write:
        png = roofline_png(report, folder / "roofline.png", ceilings)  # placed kernels imply ceilings
        if png:
            report.artifacts["roofline_png"] = str(png)
        (folder / "profile.json").write_text(report.model_dump_json(indent=1))
        report.artifacts["json"] = str(folder / "profile.json")
    return report


# A candidate that asks for a compensated tensor-core product (see ProblemHints.compensated).
COMPENSATED = re.compile(r"""input_precision\s*=\s*["']tf32x3["']|\b(?:3x_?tf32|bf16x3|tf32x3)\b""", re.IGNORECASE)


def _hints(problem, precision: str) -> ProblemHints:
    """What the problem tells the tools: its byte budget, and whether it is a matrix product."""
    try:
        from loopwise.kernels.roofline.floor import count_work

        work = count_work(problem)
    except Exception:  # noqa: BLE001 - hints are optional
        return ProblemHints(precision=precision)
    budget = sum(x or 0 for x in (work.input_bytes, work.output_bytes, work.param_bytes)) or None
    dtype = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get((work.dtype or "").replace("torch.", ""))
    return ProblemHints(matmul_shaped=bool(work.flops), precision=precision, input_dtype=dtype,
                        min_dram_bytes=budget)


def _kernel_reports(measured, classifications, sass_kernels, traced, summaries, hints, mode,
                    also=()) -> list[KernelReport]:
    """One report per distinct kernel: ncu's launches when measured, else the trace's kernels."""
    names: list[str] = []
    for m in measured:
        if m.name not in names:
            names.append(m.name)
    if not names and traced is not None:
        names = list(dict.fromkeys(k.name for k in traced.kernels))
    if not names:
        names = list(dict.fromkeys(k.name for k, _ in sass_kernels))
    total_flops = sum((m.fp32_flops or 0) for m in measured) or None
    reports = []
    for name in names:
        launches = [m for m in measured if m.name == name]
        m = launches[0] if launches else None
        sass, launch = next(((k, lc) for k, lc in sass_kernels if names_match(name, k.name)), (None, None))
        if m is not None and (m.grid_blocks or m.block_threads):
            launch = LaunchConfig(grid_blocks=m.grid_blocks, block_threads=m.block_threads,
                                  num_warps=None if m.block_threads else (launch.num_warps if launch else None))
        cls = classifications.get(name)
        # A kernel is matmul-shaped when the problem is and this kernel does most of the FLOPs.
        own = hints
        if hints.matmul_shaped and total_flops and m is not None and (m.fp32_flops or 0) < 0.25 * total_flops:
            own = hints.model_copy(update={"matmul_shaped": False})
        inp = ToolInput(sass=sass, ncu=m, classification=cls, launch=launch, hints=own, kernels=summaries)
        found = diagnose(inp, mode, also=tuple(also))
        traced_k = next((k for k in (traced.kernels if traced else ()) if names_match(name, k.name)), None)
        duration = (sum(x.duration_s for x in launches if x.duration_s) / len(launches) * 1e6
                    if launches and any(x.duration_s for x in launches) else
                    traced_k.duration_us if traced_k else None)
        res = sass.resources if sass is not None else None
        reports.append(KernelReport(
            name=name, launches=max(len(launches), 1), duration_us=duration,
            dram_mb=m.dram_bytes / 1e6 if m is not None and m.dram_bytes is not None else None,
            gflop=m.fp32_flops / 1e9 if m is not None and m.fp32_flops is not None else None,
            kernel_class=cls.kernel_class if cls else None, fraction_of_sol=cls.fraction_of_sol if cls else None,
            at_roofline=cls.at_roofline if cls else None,
            arithmetic_intensity=cls.arithmetic_intensity if cls else None,
            achieved_gbs=cls.achieved_gbs if cls else None, achieved_tflops=cls.achieved_tflops if cls else None,
            explanation=cls.explanation if cls else None,
            registers=(m.registers_per_thread if m is not None and m.registers_per_thread else
                       getattr(res, "registers", None)),
            spills=(bool((res.spill_store_bytes or 0) + (res.spill_load_bytes or 0))
                    if res is not None and (res.spill_store_bytes is not None or res.spill_load_bytes is not None)
                    else None),
            tensor_core=(sass.tensor_core[0].variant if sass is not None and sass.tensor_core else None),
            findings=found))
    return reports


