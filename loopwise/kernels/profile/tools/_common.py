"""Small helpers the ncu-based tools share (not a tool: the registry skips ``_`` modules)."""

from __future__ import annotations

from loopwise.kernels.profile.findings import ToolInput


def metric(inp: ToolInput, name: str) -> float | None:
    """A raw ncu metric of the kernel, ``None`` when ncu was not run or did not collect it."""
    return None if inp.ncu is None else inp.ncu.metric(name)


def fmt_bytes(n: float) -> str:
    """Bytes in decimal units a person reads fast: 512 B, 3.2 KB, 48 MB, 1.5 GB."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_time(seconds: float) -> str:
    """Seconds as ns, us, ms or s."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
