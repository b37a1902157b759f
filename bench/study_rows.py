"""The rows file of a study that accumulates over several runs (``bench/smollm2_study.py --resume``):
what its earlier runs settled (the settings every comparison must share), which task and seed
comparisons are finished, how long one took, and the summary rows over all of them.

A file's rows are a JSON list. ``kind`` says what a row is: ``meta`` (one per run), ``settings``
(the study's, once), ``calibration``, ``comparison`` and ``method`` rows (a finished task and
seed), ``error`` (a comparison that failed) and ``summary`` (rewritten by every run). A file
written before the ``settings`` row existed gives its settings through its first ``meta`` row's
command line and its ``calibration`` row.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

SIZE = "{seeds} seed(s), a budget of {budget} default stages per method at depth {depth}, preset {preset}"
REDUCED = "reduced study: " + SIZE + "; smaller than the tiny policies' comparison (5 seeds, 8 stages, depth 4)"
FULL = (5, 8, 4)  # seeds, default stages, depth: the size of the tiny policies' comparison


class StudyError(Exception):
    """A rows file that cannot be continued, or settings that differ from its own: one line."""


@dataclass(frozen=True)
class StudySettings:
    """What every comparison of a study shares, so that seeds and tasks can be pooled: the model,
    the preset, the tree's depth, the methods and the budget of default stages per method (the
    same samples for every method)."""

    policy: str
    preset: str
    depth: int
    methods: tuple[str, ...]
    budget_stages: int

    def row(self) -> dict:
        return {"kind": "settings", **asdict(self), "methods": list(self.methods)}

    @classmethod
    def from_row(cls, row: dict) -> StudySettings:
        return cls(row["policy"], row["preset"], int(row["depth"]), tuple(row["methods"]), int(row["budget_stages"]))


def read_rows(path: str | os.PathLike) -> list[dict]:
    """The rows of an earlier run's file.

    Raises:
        StudyError: No such file, or not a list of rows.
    """
    path = Path(path)
    if not path.is_file():
        raise StudyError(f"{path}: no such file to resume")
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StudyError(f"{path}: not a rows file ({type(exc).__name__})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "kind" in r for r in rows):
        raise StudyError(f"{path}: not a rows file (a JSON list of rows with a kind)")
    return rows


def write_rows(path: str | os.PathLike, rows: list[dict]) -> None:
    """All rows, through a temporary file and a rename: a run killed while writing leaves the
    previous file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rows, indent=1, default=str))
    os.replace(tmp, path)


def recorded_settings(rows: list[dict], from_argv: Callable[[list[str]], dict]) -> StudySettings | None:
    """The settings the rows were made with: their ``settings`` row, else (an older file) the first
    ``meta`` row's command line read by ``from_argv`` and the ``calibration`` row's budget. None
    when no comparison is recorded."""
    row = next((r for r in rows if r["kind"] == "settings"), None)
    if row is not None:
        return StudySettings.from_row(row)
    meta = next((r for r in rows if r["kind"] == "meta"), None)
    if meta is None or not any(r["kind"] == "comparison" for r in rows):
        return None
    given = from_argv(list(meta.get("argv") or []))
    budget = given["budget_stages"] or next((r["budget_stages"] for r in rows if r["kind"] == "calibration"), None)
    if budget is None:
        raise StudyError("the rows name no budget (no settings and no calibration row)")
    return StudySettings(given["policy"], given["preset"], given["depth"], tuple(given["methods"]), int(budget))


def differences(recorded: StudySettings, given: dict) -> list[str]:
    """``name: recorded -> given`` for every setting given (not None) that differs from the rows'."""
    out = []
    for f in fields(StudySettings):
        value = given.get(f.name)
        value = tuple(value) if isinstance(value, list) else value
        if value is not None and value != getattr(recorded, f.name):
            out.append(f"{f.name}: {_shown(getattr(recorded, f.name))} -> {_shown(value)}")
    return out


def _shown(value) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


def task_difficulties(rows: list[dict]) -> dict[str, int]:
    """Each task's difficulty in the rows' comparisons (and parts of comparisons)."""
    return {r["task"]: r["difficulty"] for r in rows if r["kind"] in ("comparison", "part")}


def remaining_methods(rows: list[dict], task: str, seed: int, methods: tuple[str, ...]) -> tuple[str, ...]:
    """The methods of ``methods`` that have no row yet for ``task`` and ``seed``, in order."""
    done = {r["method"] for r in rows if r["kind"] == "method" and (r["task"], r["seed"]) == (task, seed)}
    return tuple(m for m in methods if m not in done)


def longest_part_seconds(rows: list[dict]) -> dict[str, float]:
    """Per task, the longest single method's wall time so far (a ``part`` row, else a whole
    comparison's time over its methods): the estimate of the next method's."""
    out: dict[str, float] = {}
    for r in rows:
        if r["kind"] == "part":
            seconds = float(r["seconds"])
        elif r["kind"] == "comparison":
            n = sum(1 for m in rows if m["kind"] == "method" and (m["task"], m["seed"]) == (r["task"], r["seed"]))
            seconds = float(r["seconds"]) / max(n, 1)
        else:
            continue
        out[r["task"]] = max(out.get(r["task"], 0.0), seconds)
    return out


def merged_comparison(rows: list[dict], task: str, seed: int) -> dict:
    """The comparison row of a comparison run a method at a time, from its ``part`` rows: their
    seconds added, their stages joined; the base's tuning reward, which every part must share.

    Raises:
        StudyError: the parts started from different bases.
    """
    parts = [r for r in rows if r["kind"] == "part" and (r["task"], r["seed"]) == (task, seed)]
    bases = {r.get("base_tune_reward") for r in parts}
    if len(bases) != 1:
        raise StudyError(f"{task} seed {seed}: its methods started from different bases (tuning rewards "
                         f"{sorted(bases, key=str)}): not one comparison")
    first = parts[0]
    keep = {k: v for k, v in first.items() if k not in ("kind", "methods", "seconds", "stages", "session_seconds")}
    return {**keep, "kind": "comparison", "parts": len(parts), "seconds": round(sum(float(r["seconds"]) for r in parts), 1),
            "session_seconds": round(sum(float(r.get("session_seconds") or 0) for r in parts), 2),
            "stages": [st for r in parts for st in r.get("stages", [])]}


def finished(rows: list[dict], retry_failed: bool = False) -> set[tuple[str, int]]:
    """(task, seed) comparisons already done: those with a comparison row, and those that failed
    unless ``retry_failed``."""
    done = {(r["task"], r["seed"]) for r in rows if r["kind"] == "comparison"}
    if not retry_failed:
        done |= {(r["task"], r["seed"]) for r in rows if r["kind"] == "error"}
    return done


def without_failures(rows: list[dict], retried: set[tuple[str, int]]) -> list[dict]:
    """The rows less the error rows of the comparisons about to run again."""
    return [r for r in rows if not (r["kind"] == "error" and (r["task"], r["seed"]) in retried)]


def longest_seconds(rows: list[dict]) -> dict[str, float]:
    """Per task, the longest finished comparison's wall time: the estimate of the next one's."""
    out: dict[str, float] = {}
    for r in rows:
        if r["kind"] == "comparison":
            out[r["task"]] = max(out.get(r["task"], 0.0), float(r["seconds"]))
    return out


def method_gpus(rows: list[dict]) -> dict[tuple[str, int, str], str | None]:
    """(task, seed, method) -> the GPU its row was made on: that of the run (``meta`` row) before it."""
    gpu, out = None, {}
    for r in rows:
        if r["kind"] == "meta":
            gpu = r.get("gpu")
        elif r["kind"] == "method":
            out[(r["task"], r["seed"], r["method"])] = gpu
    return out


def other_gpu_seeds(rows: list[dict], reference: str = "tree") -> dict[str, dict[str, list[int]]]:
    """Per task and method, the seeds whose method ran on another GPU model than the seed's
    ``reference``: no pair (two machines' greedy decoding of one base already differs)."""
    gpus = method_gpus(rows)
    out: dict[str, dict[str, list[int]]] = {}
    for (task, seed, method), gpu in gpus.items():
        ref = gpus.get((task, seed, reference), gpu)
        if method != reference and gpu != ref:
            out.setdefault(task, {}).setdefault(method, []).append(seed)
    return out


def seed_results(rows: list[dict]) -> dict[str, list[dict]]:
    """Per task, one entry per finished seed as ``summarize_seeds`` reads it: ``settings.seed`` and
    each method's ``test_reward`` (and its groups without reward variance, where recorded); a
    method run on another GPU than its seed's tree is left out of that seed."""
    done = {(r["task"], r["seed"]) for r in rows if r["kind"] == "comparison"}
    other = other_gpu_seeds(rows)
    out: dict[str, dict[int, dict]] = {}
    for r in rows:
        if r["kind"] != "method" or (r["task"], r["seed"]) not in done:
            continue
        if r["seed"] in other.get(r["task"], {}).get(r["method"], ()):
            continue
        entry = out.setdefault(r["task"], {}).setdefault(r["seed"], {"settings": {"seed": r["seed"]}, "results": {}})
        entry["results"][r["method"]] = {"test_reward": r["test_reward"],
                                         "zero_variance_groups": r.get("zero_variance_groups")}
    return {task: [seeds[s] for s in sorted(seeds)] for task, seeds in out.items()}


def summary_rows(rows: list[dict], settings: StudySettings, summarize: Callable[[list[dict]], list[dict]]
                 ) -> list[dict]:
    """The ``summary`` rows over every finished seed of every task: each method's mean test reward
    and the tree's paired difference with 95% intervals, alone and with all of the task's
    comparisons at once (``summarize``: ``summarize_seeds``)."""
    out = []
    others = other_gpu_seeds(rows)
    for task, seeds in sorted(seed_results(rows).items()):
        size = (len(seeds), settings.budget_stages, settings.depth)
        note = (SIZE if all(a >= b for a, b in zip(size, FULL)) else REDUCED).format(
            seeds=len(seeds), budget=settings.budget_stages, depth=settings.depth, preset=settings.preset)
        other = others.get(task, {})
        common = {"kind": "summary", "task": task, "seeds": len(seeds),
                  "seed_list": [e["settings"]["seed"] for e in seeds], "note": note}
        summaries = summarize(seeds)
        for s in summaries:
            left_out = sorted(seed for seed in other.get(s["method"], ()) if seed in common["seed_list"])
            out.append({**common, **s, "other_gpu_seeds": left_out} if left_out else {**common, **s})
        # a method run on another GPU than the tree's in every seed: said, with no pair
        k = max((s.get("comparisons", 0) for s in summaries), default=0)
        for method in sorted(set(other) - {s["method"] for s in summaries}):
            left_out = sorted(seed for seed in other[method] if seed in common["seed_list"])
            if left_out:
                out.append({**common, "method": method, "test": None, "versus_tree": None,
                            "verdict": "no pair", "versus_tree_all": None, "verdict_all": "no pair",
                            "comparisons": k, "other_gpu_seeds": left_out})
    return out


def summary_line(row: dict) -> str:
    """One summary row as a line of the printed table."""
    v = row["versus_tree"]
    span = "" if not v or math.isnan(v["low"]) else f" [{v['low']:+.3f}, {v['high']:+.3f}]"
    other = row.get("other_gpu_seeds")
    left_out = (f"; seed {', '.join(map(str, other))} left out: another GPU than the tree's" if other else "")
    test = f"{row['test']['mean']:.3f}" if row.get("test") else "  -  "
    k, w = row.get("comparisons", 0), row.get("versus_tree_all")
    family = (f"; all {k} at once [{w['low']:+.3f}, {w['high']:+.3f}]: {row.get('verdict_all', '-')}"
              if v and w and k > 1 and not math.isnan(w["low"]) else "")
    return (f"{row['task']:28s} {row['method']:7s} test {test}  tree-method "
            f"{(v['mean'] if v else float('nan')):+.3f}{span}  {row['verdict']}{family}  ({row['seeds']} seeds{left_out})")
