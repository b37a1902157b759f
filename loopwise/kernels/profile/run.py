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
from loopwise.kernels.profile.findings import Finding, KernelSummary, LaunchConfig, ProblemHints, ToolInput
from loopwise.kernels.profile.registry import Mode, diagnose
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


def _cubins(folder: Path) -> list[tuple[Path, dict]]:
    """Triton's cubins under ``folder`` (its private cache, or a fixture), each with its metadata
    (num_warps, shared)."""
    found = []
    for cubin in sorted(folder.rglob("*.cubin")):
        meta, side = {}, cubin.with_suffix(".json")
        if side.is_file():
            try:
                meta = json.loads(side.read_text())
            except ValueError:
                meta = {}
        found.append((cubin, meta))
    return found


def _short(name: str) -> str:
    return name if len(name) <= 90 else name[:87] + "..."


def _matches(a: str, b: str) -> bool:
    """Kernel names from different tools: ncu's function name vs the symbol in SASS or the trace."""
    return a == b or (len(a) > 3 and a in b) or (len(b) > 3 and b in a)


def _base_name(name: str) -> str:
    """A kernel's function name without return type, namespaces, template or parameter lists: what
    ncu's demangling (``elementwise_kernel<128, 2, ...>``) and the trace's (``void
    at::native::elementwise_kernel<128, 2, ...>``) have in common."""
    head = re.split(r"[<(]", name.strip().removeprefix("void ").strip(), maxsplit=1)[0]
    return head.rsplit("::", 1)[-1].strip()


def _pair_launches(summaries, measured) -> list:
    """For each traced launch, the ncu launch that measured it (or None): in order when both saw the
    same sequence of kernels (ncu and the trace cover the same call), else by a function name that
    is unique on both sides."""
    bases_t, bases_m = [_base_name(s.name) for s in summaries], [_base_name(m.name) for m in measured]
    if bases_t == bases_m:
        return list(measured)
    unique = {b for b in bases_m if bases_m.count(b) == 1 and bases_t.count(b) == 1}
    by_base = {b: m for b, m in zip(bases_m, measured) if b in unique}
    return [by_base.get(b) for b in bases_t]


def _summaries(traced, measured, classifications) -> tuple | None:
    """The trace's launches for the cross-kernel tools, with ncu's DRAM bytes and roofline class
    filled in where a measured launch pairs with them."""
    if traced is None:  # no trace: ncu's launches in order, without the host gaps between them
        return tuple(KernelSummary(name=m.name, duration_s=m.duration_s, dram_bytes=m.dram_bytes,
                                   grid_blocks=m.grid_blocks,
                                   kernel_class=getattr(classifications.get(m.name), "kernel_class", None))
                     for m in measured if m.duration_s) or None
    summaries = traced.summaries()
    out = []
    for s, m in zip(summaries, _pair_launches(summaries, measured)):
        name = m.name if m is not None else next((n for n in classifications if _matches(n, s.name)), "")
        cls = classifications.get(name)
        update = {"kernel_class": cls.kernel_class if cls else None}
        if m is not None and m.dram_bytes is not None:
            update["dram_bytes"] = m.dram_bytes
        out.append(s.model_copy(update=update))
    return tuple(out)


def profile(problem, candidate: Path | None, out_dir: Path, *, device: str = "cuda", mode: Mode = "proactive",
            ncu: NcuChoice = "auto", ncu_set: str = "full", precision: str = "fp32",
            timeout_s: float = 600.0, trace: bool = True) -> ProfileReport:
    """Profiles ``candidate`` (a file defining ``ModelNew``; ``None``: the reference ``Model``) on
    ``problem`` (a loaded :class:`~loopwise.kernels.problem.Problem`). Artifacts go to ``out_dir``,
    which :func:`analyze` can read again later, on any machine.

    ``trace=False`` (the search loop) skips the system-level run when Nsight Compute runs: one child
    process instead of two (the traced run is about half a profile's time: docs/log/2026-11-30.md). The kernels
    then come from ncu, without the host gaps between them (the launch-bound tool estimates them).

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
    return analyze(out_dir, mode=mode, hints=hints, problem_name=problem.name,
                   candidate=str(candidate) if candidate else "reference",
                   device=manifest.get("device_name") or device, costs=costs, notes=notes)


def analyze(folder: Path, *, mode: Mode = "proactive", hints: ProblemHints | None = None, problem_name: str = "",
            candidate: str = "", device: str = "", costs: dict | None = None, notes: list | None = None,
            write: bool = True) -> ProfileReport:
    """The report of a profile folder: what :func:`profile` left there, or a recorded fixture
    (``ncu.csv``, ``trace.json``, ``*.cubin`` with Triton's ``*.json``, ``*.sass.txt``,
    ``ceilings.json``, ``manifest.json``, ``hints.json``). Needs no GPU: the device's ceilings and SM count are read
    from the folder. Writes ``roofline.png`` and ``profile.json`` there unless ``write`` is false."""
    folder = Path(folder)
    costs, notes, artifacts = dict(costs or {}), list(notes or []), {}
    manifest = _manifest(folder)
    hints = _folder_hints(folder, hints, notes)

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
    sass_kernels = _sass(folder, manifest, notes)
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
        ceilings = _ceilings(folder, device)
        if ceilings is None:
            notes.append("no ceilings.json and no CUDA device to measure them: kernels not classified")
        else:
            from loopwise.kernels.profile.classify import classify, sample_from_ncu

            sms = manifest.get("sms")
            for m in measured:
                if m.duration_s:
                    classifications.setdefault(m.name, classify(sample_from_ncu(m), ceilings, sms))
    summaries = _summaries(traced, measured, classifications)
    kernels = _kernel_reports(measured, classifications, sass_kernels, traced, summaries, hints, mode)
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


def _folder_hints(folder: Path, given: ProblemHints | None, notes: list[str]) -> ProblemHints:
    """The problem's hints recorded with the profile (``hints.json``), with the fields the caller
    set explicitly taking precedence (e.g. another precision policy for the same recording)."""
    recorded = ProblemHints()
    if (folder / "hints.json").is_file():
        try:
            recorded = ProblemHints.model_validate_json((folder / "hints.json").read_text())
        except ValueError:
            notes.append("hints.json unreadable: the problem's hints are not used")
    if given is None:
        return recorded
    return recorded.model_copy(update=given.model_dump(exclude_unset=True))


def _manifest(folder: Path) -> dict:
    for path in (folder / "run" / "manifest.json", folder / "manifest.json", folder / "ncu_run" / "manifest.json"):
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except ValueError:
                return {}
    return {}


def _ceilings(folder: Path, device: str):
    """The ceilings recorded with the profile, else measured (cached) on this machine's GPU."""
    from loopwise.kernels.roofline.ceilings import Ceilings

    path = folder / "ceilings.json"
    if path.is_file():
        try:
            return Ceilings.model_validate_json(path.read_text())
        except ValueError:
            pass
    from loopwise.kernels.roofline import ceilings as ceilings_module

    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return ceilings_module.load_or_measure(device if device.startswith("cuda") else "cuda")
    except Exception:  # noqa: BLE001 - no classification rather than no report
        return None


def _sass(folder: Path, manifest: dict, notes: list[str]) -> list[tuple[object, LaunchConfig | None]]:
    """Per kernel function: its SASS record and launch configuration from Triton's metadata."""
    out: list[tuple[object, LaunchConfig | None]] = []
    binaries = _cubins(folder) + [(Path(p), {}) for p in manifest.get("extensions", []) if Path(p).is_file()]
    texts = sorted(folder.glob("*.sass.txt"))
    if not binaries and not texts:
        return out
    from loopwise.kernels.profile.sass import DisassemblyError, ToolNotFoundError, parse_sass, profile_cubin

    def disassembled(path):
        try:
            return profile_cubin(path)
        except (ToolNotFoundError, DisassemblyError) as exc:
            return exc

    # Each binary is a few disassembler processes: run them side by side (a multi-kernel candidate
    # has one cubin per Triton kernel).
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(binaries)))) as pool:
        results = list(pool.map(disassembled, [path for path, _ in binaries]))
    for (path, meta), prof in zip(binaries, results):
        if isinstance(prof, ToolNotFoundError):
            notes.append(f"SASS skipped: {prof}")
            break
        if isinstance(prof, DisassemblyError):
            notes.append(f"SASS of {path.name} skipped: {prof}")
            continue
        warps, shared = meta.get("num_warps"), meta.get("shared")
        for k in prof.kernels:
            if shared is not None and k.resources is not None:
                k = k.model_copy(update={"resources": k.resources.model_copy(update={"dynamic_shared_bytes": shared})})
            out.append((k, LaunchConfig(num_warps=warps) if warps else None))
    for path in texts:
        _, kernels = parse_sass(path.read_text(errors="replace"))
        out += [(k, None) for k in kernels]
    return out


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


def _kernel_reports(measured, classifications, sass_kernels, traced, summaries, hints, mode) -> list[KernelReport]:
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
        sass, launch = next(((k, lc) for k, lc in sass_kernels if _matches(name, k.name)), (None, None))
        if m is not None and (m.grid_blocks or m.block_threads):
            launch = LaunchConfig(grid_blocks=m.grid_blocks, block_threads=m.block_threads,
                                  num_warps=None if m.block_threads else (launch.num_warps if launch else None))
        cls = classifications.get(name)
        # A kernel is matmul-shaped when the problem is and this kernel does most of the FLOPs.
        own = hints
        if hints.matmul_shaped and total_flops and m is not None and (m.fp32_flops or 0) < 0.25 * total_flops:
            own = hints.model_copy(update={"matmul_shaped": False})
        inp = ToolInput(sass=sass, ncu=m, classification=cls, launch=launch, hints=own, kernels=summaries)
        found = diagnose(inp, mode)
        traced_k = next((k for k in (traced.kernels if traced else ()) if _matches(name, k.name)), None)
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


CLASS_COLOURS = {"memory_bound": "#1f77b4", "compute_bound": "#d62728", "latency_bound": "#9467bd",
                 "underutilized": "#ff7f0e", None: "#7f7f7f"}


def roofline_png(report: ProfileReport, path: Path, ceilings=None) -> Path | None:
    """Two panels: the kernels on the roofline (FLOP/byte vs TFLOP/s, where both are known) and
    each kernel's fraction of its speed of light, coloured by class. ``None`` when nothing was
    measured or matplotlib is missing."""
    placed = [k for k in report.kernels if k.fraction_of_sol is not None]
    if not placed:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        report.notes.append("roofline plot skipped: matplotlib is not installed")
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    roof = [k for k in placed if k.arithmetic_intensity and k.achieved_tflops]
    if roof:
        if ceilings is not None:
            bw, peak = ceilings.bandwidth_gbs * 1e9, ceilings.fp32_tflops * 1e12
            xs = [10 ** (e / 10) for e in range(-30, 41)]
            ax1.plot(xs, [min(peak, bw * x) / 1e12 for x in xs], color="black", lw=1.5, label="measured fp32 roof")
        for k in roof:
            ax1.scatter(k.arithmetic_intensity, k.achieved_tflops, color=CLASS_COLOURS.get(k.kernel_class), s=40)
            ax1.annotate(_short(k.name)[:28], (k.arithmetic_intensity, k.achieved_tflops), fontsize=7)
        ax1.set_xscale("log")
        ax1.set_yscale("log")
        ax1.legend(fontsize=8)
    else:
        ax1.text(0.5, 0.5, "no kernel with both FLOPs and DRAM bytes measured", ha="center", va="center",
                 transform=ax1.transAxes, fontsize=9)
    ax1.set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
    ax1.set_ylabel("achieved TFLOP/s")
    ax1.set_title("roofline")
    labels = [_short(k.name)[:40] for k in placed]
    ax2.barh(range(len(placed)), [100 * k.fraction_of_sol for k in placed],
             color=[CLASS_COLOURS.get(k.kernel_class) for k in placed])
    ax2.set_yticks(range(len(placed)), labels, fontsize=7)
    ax2.axvline(80, color="grey", ls="--", lw=1)
    ax2.set_xlabel("% of speed of light (dashed: at roofline)")
    ax2.set_title("per kernel, coloured by class")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in list(CLASS_COLOURS.values())[:4]]
    ax2.legend(handles, [c.replace("_", " ") for c in list(CLASS_COLOURS)[:4]], fontsize=7, loc="lower right")
    fig.suptitle(f"{report.problem} — {Path(report.candidate).name} on {report.device}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
