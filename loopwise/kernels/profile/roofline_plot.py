"""The roofline plot of a profile: the kernels on the roofline and their fractions of the speed of light."""

from __future__ import annotations

from pathlib import Path


def _short(name: str) -> str:
    return name if len(name) <= 90 else name[:87] + "..."


CLASS_COLOURS = {"memory_bound": "#1f77b4", "compute_bound": "#d62728", "latency_bound": "#9467bd",
                 "underutilized": "#ff7f0e", None: "#7f7f7f"}


def roofline_png(report, path: Path, ceilings=None) -> Path | None:
    """Two panels for ``report`` (a ProfileReport): the kernels on the roofline (FLOP/byte vs TFLOP/s, where both are known) and
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

