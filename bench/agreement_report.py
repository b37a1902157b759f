"""Rows, resume and the markdown summary of ``kernelbench_agreement.py``."""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import os
import platform
import statistics
import sys
from pathlib import Path

COLUMNS = [
    "problem", "kind", "sizes", "kb_correct", "our_status", "our_correct", "kb_speedup", "our_speedup",
    "speedup_ratio", "kb_s", "our_s", "our_reasons", "our_flags", "kb_status", "kb_compiled", "kb_ms",
    "kb_ref_ms", "kb_excessive", "kb_first_s", "kb_runs", "kb_runs_agree", "kb_note", "kb_shims", "our_ms",
    "our_ref_ms", "our_compile_s", "our_eval_s", "our_warm_s", "finished_at",
]
_BOOLS = {"kb_correct", "our_correct", "kb_compiled", "kb_excessive", "kb_runs_agree"}
_FLOATS = {"kb_speedup", "our_speedup", "speedup_ratio", "kb_s", "our_s", "kb_ms", "kb_ref_ms", "kb_first_s",
           "our_ms", "our_ref_ms", "our_compile_s", "our_eval_s", "our_warm_s"}


def _parse(column: str, text: str):
    if text == "":
        return None
    if column in _BOOLS:
        return text == "True"
    if column in _FLOATS:
        return float(text)
    if column == "kb_runs":
        return int(text)
    return text


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class RowTable:
    """One row per (problem, kind), saved to every path after each change (atomically)."""

    def __init__(self, paths: list[Path], sizes: str, fresh: bool) -> None:
        self.paths, self.sizes = paths, sizes
        self._rows: dict[tuple[str, str], dict] = {}
        self._other: dict[tuple[str, str, str], dict] = {}  # rows of other size modes, kept as they are
        for path in paths if not fresh else []:
            self._load(path)

    def _load(self, path: Path) -> None:
        if not path.is_file():
            return
        with path.open(newline="") as fh:
            for raw in csv.DictReader(fh):
                row = {c: _parse(c, raw.get(c) or "") for c in COLUMNS}
                if row["sizes"] != self.sizes:
                    self._other[(row["sizes"], row["problem"], row["kind"])] = row
                    continue
                key = (row["problem"], row["kind"])
                old = self._rows.get(key)
                if old is None or (row["finished_at"] or "") > (old["finished_at"] or ""):
                    self._rows[key] = row

    def get(self, problem: str, kind: str) -> dict:
        return dict(self._rows.get((problem, kind)) or {"problem": problem, "kind": kind, "sizes": self.sizes})

    def put(self, problem: str, kind: str, row: dict) -> None:
        row["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self._rows[(problem, kind)] = row
        self.save()

    def save(self) -> None:
        for path in self.paths:
            self._save(path)

    def rows(self) -> list[dict]:
        return list(self._rows.values())

    def _save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(COLUMNS)
            for row in [*self._other.values(), *self._rows.values()]:
                writer.writerow([_format(row.get(c)) for c in COLUMNS])
        os.replace(tmp, path)


def derived(row: dict) -> dict:
    kb, ours = row.get("kb_speedup"), row.get("our_speedup")
    return {"speedup_ratio": ours / kb if kb and ours else None}


def _verdict(row: dict, side: str) -> str:
    if side == "kb":
        if row.get("kb_status") != "ok":
            return row.get("kb_status") or "-"
        return "accept" if row.get("kb_correct") else ("reject" if row.get("kb_compiled") else "compile_fail")
    status = row.get("our_status") or "-"
    return "accept" if status == "correct" else status


def progress_line(row: dict, wall_s: float) -> str:
    def num(v, fmt="{:.2f}"):
        return fmt.format(v) if isinstance(v, (int, float)) else "-"

    return (f"{row['problem']:34s} {row['kind']:8s} KB {_verdict(row, 'kb'):12s} {num(row.get('kb_speedup'))}x"
            f"  ours {_verdict(row, 'our'):14s} {num(row.get('our_speedup'))}x"
            f"  kb_s {num(row.get('kb_s'), '{:.1f}')} our_s {num(row.get('our_s'), '{:.1f}')}"
            f"  {row.get('our_reasons') or ''}  ({wall_s:.0f} s)")


def _both_ran(row: dict) -> bool:
    return row.get("kb_status") == "ok" and row.get("our_status") not in (None, "", "skipped")


def summary_numbers(rows: list[dict]) -> dict:
    """The headline numbers: verdict agreement, exploits accepted, speedup and time ratios."""
    graded = [r for r in rows if r["kind"] in ("correct", "wrong") and _both_ran(r)]
    exploits = [r for r in rows if r["kind"] == "exploit"]
    both_correct = [r for r in rows if r.get("speedup_ratio")]
    times = [r["our_s"] / r["kb_s"] for r in rows if (r.get("our_s") or 0) > 0 and (r.get("kb_s") or 0) > 0]
    full = [r["our_s"] / r["kb_s"] for r in both_correct if (r.get("our_s") or 0) > 0 and (r.get("kb_s") or 0) > 0]
    warm = [r["our_warm_s"] / r["kb_s"] for r in both_correct
            if (r.get("our_warm_s") or 0) > 0 and (r.get("kb_s") or 0) > 0]
    return {
        "agree": sum(1 for r in graded if bool(r.get("kb_correct")) == bool(r.get("our_correct"))),
        "graded": len(graded),
        "kb_exploits": sum(1 for r in exploits if r.get("kb_status") == "ok" and r.get("kb_correct")),
        "kb_exploits_n": sum(1 for r in exploits if r.get("kb_status") == "ok"),
        "our_exploits": sum(1 for r in exploits if r.get("our_status") == "correct"),
        "our_exploits_n": sum(1 for r in exploits if r.get("our_status") not in (None, "", "skipped")),
        "median_dev": statistics.median(abs(r["speedup_ratio"] - 1) for r in both_correct) if both_correct else None,
        "n_both_correct": len(both_correct),
        "time_geomean": _geomean(times), "n_times": len(times),
        "time_geomean_full": _geomean(full), "n_full": len(full),
        "time_geomean_warm": _geomean(warm), "n_warm": len(warm),
    }


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _environment() -> str:
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
        versions = f"torch {torch.__version__} (CUDA {torch.version.cuda})"
    except Exception:  # noqa: BLE001 - the report must be written even when torch is broken
        gpu, versions = "unknown", "torch unknown"
    try:
        import triton

        versions += f", triton {triton.__version__}"
    except Exception:  # noqa: BLE001
        versions += ", triton absent"
    return f"{gpu}; Python {platform.python_version()}, {versions}"


def _kind_table(rows: list[dict]) -> list[str]:
    lines = ["| kind | pairs | KernelBench accepts | loopwise accepts | same verdict |", "|---|---|---|---|---|"]
    for kind in ("correct", "wrong", "exploit"):
        sub = [r for r in rows if r["kind"] == kind]
        kb = [r for r in sub if r.get("kb_status") == "ok"]
        ours = [r for r in sub if r.get("our_status") not in (None, "", "skipped")]
        both = [r for r in sub if _both_ran(r)]
        same = sum(1 for r in both if bool(r.get("kb_correct")) == bool(r.get("our_correct")))
        lines.append(f"| {kind} | {len(sub)} | {sum(1 for r in kb if r.get('kb_correct'))} / {len(kb)} | "
                     f"{sum(1 for r in ours if r.get('our_status') == 'correct')} / {len(ours)} | "
                     f"{same} / {len(both)} |")
    return lines


def _pair_table(rows: list[dict]) -> list[str]:
    def num(v, fmt="{:.2f}"):
        return fmt.format(v) if isinstance(v, (int, float)) else "-"

    lines = ["| problem | kind | KernelBench | loopwise | KB speedup | our speedup | ratio | KB s | our s | "
             "loopwise reasons / KB note |", "|---|---|---|---|---|---|---|---|---|---|"]
    order = {"correct": 0, "wrong": 1, "exploit": 2}
    for r in sorted(rows, key=lambda r: (int(r["problem"].split("_")[0]), order.get(r["kind"], 9))):
        kb = _verdict(r, "kb") + (" (>10x flag)" if r.get("kb_excessive") else "")
        note = r.get("our_reasons") or ""
        if r.get("kb_note") and r.get("kb_status") != "unavailable":  # that one is stated once, above
            note = (note + " / KB: " if note else "KB: ") + r["kb_note"][:80].replace("|", "/")
        lines.append(f"| {r['problem']} | {r['kind']} | {kb} | {_verdict(r, 'our')} | {num(r.get('kb_speedup'))} | "
                     f"{num(r.get('our_speedup'))} | {num(r.get('speedup_ratio'))} | {num(r.get('kb_s'), '{:.1f}')} | "
                     f"{num(r.get('our_s'), '{:.1f}')} | {note.replace(chr(10), ' ')} |")
    return lines


def _unavailable_note(rows: list[dict]) -> list[str]:
    notes = {r.get("kb_note") for r in rows if r.get("kb_status") == "unavailable"}
    if not notes:
        return []
    return [f"- KernelBench's harness could not be imported for {sum(r.get('kb_status') == 'unavailable' for r in rows)}"
            f" pair(s): {'; '.join(sorted(n for n in notes if n))}"]


def _shim_note(rows: list[dict]) -> list[str]:
    shims = sorted({m for r in rows for m in (r.get("kb_shims") or "").split(",") if m})
    if not shims:
        return []
    return [f"- KernelBench ran with empty placeholder modules for {', '.join(shims)} (--kb-shim-llm-clients): "
            "they are imported by kernelbench/utils.py for LLM queries and not used by eval_kernel_against_ref"]


def write_markdown(path: Path, rows: list[dict], args, stopped: str) -> None:
    n = summary_numbers(rows)

    def val(v, fmt):
        return fmt.format(v) if v is not None else "n/a"

    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# KernelBench harness vs loopwise judge — agreement", "",
        f"- date: {when}; machine: {_environment()}",
        f"- command: `{' '.join(['python3', *sys.argv])}`",
        f"- input sizes: `{args.sizes}` (see bench/agreement_set.py){'; run stopped: ' + stopped if stopped else ''}",
        "- KernelBench: `eval_kernel_against_ref(seed_num=42, num_correct_trials=5, num_perf_trials=100, "
        "backend='triton', check_for_excessive_speedup=True)`, mean of CUDA-event times; loopwise: "
        "`EvalConfig(correct_trials=5, perf_trials=100, statistic='mean', energy=False)`.",
        "- KB s = wall time of KernelBench's last call on the candidate in one process (the first call compiled "
        "the Triton kernels); it includes timing the reference. our s = `eval_s - compile_s`; the reference is "
        "timed once per problem, during its first candidate (the correct one), and reused. Triton's on-disk "
        "cache is shared: KernelBench runs first on each candidate, so loopwise's first call finds the kernels "
        "compiled (with --skip-kb, our s includes Triton's JIT compile). Judge timeouts: compile 120 s, run 60 s.",
        "",
        "## Summary", "",
        f"- verdict agreement on correct + wrong candidates: **{n['agree']} / {n['graded']}**",
        f"- exploits accepted: KernelBench **{n['kb_exploits']} / {n['kb_exploits_n']}**, "
        f"loopwise **{n['our_exploits']} / {n['our_exploits_n']}**",
        f"- median |our speedup / KB speedup - 1| where both accept: "
        f"**{val(n['median_dev'], '{:.3f}')}** (n = {n['n_both_correct']})",
        f"- geomean of our s / KB s: **{val(n['time_geomean'], '{:.2f}')}** (n = {n['n_times']}); over pairs "
        f"both accept (both ran every phase): {val(n['time_geomean_full'], '{:.2f}')} (n = {n['n_full']})",
        f"- per candidate in a warm judge (the correct candidate judged again: reference timing, ceilings and "
        f"reference model already in hand, as in a search), our s / KB s geomean: "
        f"**{val(n['time_geomean_warm'], '{:.2f}')}** (n = {n['n_warm']})",
        *_unavailable_note(rows), *_shim_note(rows), "",
        *_kind_table(rows), "", "## Pairs", "", *_pair_table(rows), "",
        *_phase_table(path.parent / "evals"),
    ]
    path.write_text("\n".join(lines))


def _phase_table(evals_dir: Path) -> list[str]:
    """Where our evaluator's seconds go: the median of each phase over the saved evaluations,
    first candidates of a judge and warm ones (``__again``) apart."""
    groups: dict[str, list[dict]] = {"first": [], "warm": []}
    for f in sorted(evals_dir.glob("*.json")) if evals_dir.is_dir() else ():
        try:
            phases = json.loads(f.read_text()).get("phases") or {}
        except (OSError, ValueError):
            continue
        groups["warm" if f.stem.endswith("__again") else "first"].append(phases)
    names = sorted({k for g in groups.values() for p in g for k in p})
    if not names:
        return []
    lines = ["## Where our time goes (median seconds per phase)", "",
             "| phase | " + " | ".join(f"{g} (n = {len(groups[g])})" for g in groups) + " |",
             "|---|" + "---|" * len(groups)]
    for name in names:
        cells = []
        for g in groups.values():
            values = [p.get(name, 0.0) for p in g]
            cells.append(f"{statistics.median(values):.3f}" if values else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines + [""]
