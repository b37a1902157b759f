"""What a profile folder holds, read back: the recorded manifest, the problem's hints, the
device's ceilings, and the SASS of every binary the profiled call loaded."""

from __future__ import annotations

import json
from pathlib import Path

from loopwise.kernels.profile.findings import LaunchConfig, ProblemHints
from loopwise.kernels.profile.sass import parse_sass


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


def folder_hints(folder: Path, given: ProblemHints | None, notes: list[str]) -> ProblemHints:
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


def read_manifest(folder: Path) -> dict:
    for path in (folder / "run" / "manifest.json", folder / "manifest.json", folder / "ncu_run" / "manifest.json"):
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except ValueError:
                return {}
    return {}


def folder_ceilings(folder: Path, device: str):
    """The ceilings recorded with the profile, else (none recorded, or recorded under another
    schema: :func:`~loopwise.kernels.roofline.ceilings.read_ceilings`) measured (cached) on this
    machine's GPU; None without one."""
    from loopwise.kernels.roofline import ceilings as ceilings_module

    recorded = ceilings_module.read_ceilings(folder / "ceilings.json")
    if recorded is not None:
        return recorded
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return ceilings_module.load_or_measure(device if device.startswith("cuda") else "cuda")
    except Exception:  # noqa: BLE001 - no classification rather than no report
        return None


def folder_sass(folder: Path, manifest: dict, notes: list[str]) -> list[tuple[object, LaunchConfig | None]]:
    """Per kernel function: its SASS record and launch configuration from Triton's metadata."""
    out: list[tuple[object, LaunchConfig | None]] = []
    binaries = _cubins(folder) + [(Path(p), {}) for p in manifest.get("extensions", []) if Path(p).is_file()]
    texts = sorted(folder.glob("*.sass.txt"))
    if not binaries and not texts:
        return out
    from loopwise.kernels.profile.sass_tools import DisassemblyError, ToolNotFoundError, profile_cubin

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

