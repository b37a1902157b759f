"""A stage's per-step metric traces as a model proposer reads them: a PNG plot for a model that
accepts images, a markdown table for one that does not.

Both show the same series (:data:`SERIES`: reward, entropy, KL, completion length, greedy probe
reward, zero-variance groups, truncation), each only when some step of the trace has it. The plot
is drawn with matplotlib's Agg canvas (no pyplot, no display, no global backend change).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

from loopwise.training import metrics as M

SERIES: tuple[tuple[str, str], ...] = (
    (M.REWARD, "reward"), (M.ENTROPY, "entropy"), (M.KL, "kl"), (M.LENGTH, "length"),
    (M.GREEDY_REWARD, "greedy reward"), (M.FRAC_ZERO_STD, "zero-variance groups"), (M.CLIPPED, "truncated"),
)
MAX_ROWS = 40  # a longer trace's table keeps evenly spaced steps, the first and the last


def _number(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def training_rows(trace: Sequence[Mapping]) -> list[Mapping]:
    """The trainer's step rows (those with a reward; held-out evaluation rows have none)."""
    return [r for r in trace if isinstance(r, Mapping) and M.REWARD in r]


def present(rows: Sequence[Mapping]) -> list[tuple[str, str]]:
    """The series some row has a number for, in :data:`SERIES` order."""
    return [(key, label) for key, label in SERIES if any(_number(r.get(key)) is not None for r in rows)]


def trace_table(trace: Sequence[Mapping]) -> str:
    """The per-step traces as a markdown table (``-`` where a step lacks a metric); empty when the
    trace has no training step."""
    rows = training_rows(trace)
    if not rows:
        return ""
    columns = present(rows)
    if len(rows) > MAX_ROWS:
        keep = {round(i * (len(rows) - 1) / (MAX_ROWS - 1)) for i in range(MAX_ROWS)}
        rows = [r for i, r in enumerate(rows) if i in keep]
    head = "| step | " + " | ".join(label for _, label in columns) + " |"
    rule = "|---" * (len(columns) + 1) + "|"
    lines = [head, rule]
    for r in rows:
        cells = [f"{v:.3g}" if (v := _number(r.get(key))) is not None else "-" for key, _ in columns]
        lines.append(f"| {r.get(M.STEP, '-')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def trace_png(trace: Sequence[Mapping], title: str = "") -> bytes:
    """The per-step traces as a PNG: one small panel per series against the step. Empty bytes
    when the trace has no training step."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = training_rows(trace)
    if not rows:
        return b""
    columns = present(rows)
    cols = min(4, len(columns))
    nrows = math.ceil(len(columns) / cols)
    fig = Figure(figsize=(3.0 * cols, 2.2 * nrows + (0.3 if title else 0)), dpi=80)
    FigureCanvasAgg(fig)
    for i, (key, label) in enumerate(columns):
        ax = fig.add_subplot(nrows, cols, i + 1)
        points = [(r.get(M.STEP), v) for r in rows if (v := _number(r.get(key))) is not None]
        ax.plot([s for s, _ in points], [v for _, v in points], marker=".", linewidth=1.2)
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
