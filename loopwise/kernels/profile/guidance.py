"""A profile report as plain text: what ``loopwise kernels profile`` prints, in lines a model or an
agent reads, most useful first (the kernels on the roofline, then the tools' findings with the moves
they suggest, then the notes), cut to a character budget."""

from __future__ import annotations

import json

KERNELS_SHOWN = 8  # kernel lines, longest first as the report lists them
FINDINGS_SHOWN = 12  # as many as the command prints


def finding_line(finding) -> str:
    """One finding as the command prints it: ``[severity] tool: guidance  → try: moves``."""
    moves = ", ".join(m if isinstance(m, str) else json.dumps(m) for m in (move.to_json() for move in finding.moves))
    return f"[{finding.severity}] {finding.tool}: {finding.guidance}" + (f"  → try: {moves}" if moves else "")


def kernel_line(kernel) -> str:
    """One kernel: its time, roofline class and the numbers behind it."""
    parts = [f"{kernel.duration_us:.1f} us" if kernel.duration_us else "time unknown",
             (kernel.kernel_class or "not classified").replace("_", " ") + (" (at roofline)" if kernel.at_roofline else "")]
    if kernel.fraction_of_sol is not None:
        parts.append(f"{100 * kernel.fraction_of_sol:.0f}% of its speed of light")
    for value, unit in ((kernel.dram_mb, "MB DRAM"), (kernel.gflop, "GFLOP")):
        if value is not None:
            parts.append(f"{value:.2f} {unit}")
    if kernel.registers:
        parts.append(f"{kernel.registers} registers")
    if kernel.tensor_core:
        parts.append(f"tensor core {kernel.tensor_core}")
    launches = f" x{kernel.launches}" if kernel.launches > 1 else ""
    return f"{kernel.name[:80]}{launches}: " + ", ".join(parts)


def guidance_lines(report) -> list[str]:
    """The report's lines in the order the command prints them."""
    lines = [f"{report.candidate} on {report.device} (tools: {report.mode})"]
    if report.trace_headline:
        lines.append(f"system: {report.trace_headline}")
    lines.append(f"kernels ({len(report.kernels)}):" if report.kernels else "kernels: none measured")
    lines += [f"- {kernel_line(k)}" for k in report.kernels[:KERNELS_SHOWN]]
    if len(report.kernels) > KERNELS_SHOWN:
        lines.append(f"- ... {len(report.kernels) - KERNELS_SHOWN} more kernels")
    if report.findings:
        lines.append("findings (highest first):")
        lines += [f"- {finding_line(f)}" for f in report.findings[:FINDINGS_SHOWN]]
    else:
        lines.append("no findings" + (" (raw mode)" if report.mode == "raw" else ""))
    lines += [f"note: {note}" for note in report.notes]
    return lines


def guidance_text(report, budget: int) -> str:
    """The report's lines within ``budget`` characters: whole lines from the top, then one line
    saying how many were cut."""
    lines = guidance_lines(report)
    kept: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        left = len(lines) - index
        marker = len(f"[{left} more lines cut to fit {budget} characters]") + 1
        if used + len(line) + 1 + (marker if left > 1 else 0) > budget:
            kept.append(f"[{left} more lines cut to fit {budget} characters]")
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept)
