"""Where ``kernels optimize`` runs stand, read back from the run store (no GPU, no torch).

A run is read from its event log alone (``settings``, ``ask``, ``evaluation``, ``best``), so a run
that is still being written, or one that was killed, reads the same way as a finished one: what
was judged so far, the fastest correct candidate, the failures by status, and the file the best
candidate was written to once the run ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopwise.kernels.optimize.settings import Tally

__all__ = ["KIND", "OptimizeStatus", "Verdict", "optimize_run", "optimize_runs"]

KIND = "kernels.optimize"


@dataclass(frozen=True)
class Verdict:
    """One judged candidate of a run.

    Attributes:
        node: the candidate's node in the search tree.
        status: the judge's status (``correct``, ``crash``, ``exploit``...).
        speedup: over eager PyTorch; only for a correct candidate.
        reason: the first rejection as ``code: message``; empty when there is none.
    """

    node: int | None
    status: str
    speedup: float | None
    reason: str = ""


@dataclass(frozen=True)
class OptimizeStatus:
    """What one optimize run has done so far.

    Attributes:
        run_id: the run's id in the store.
        run_dir: the run's folder.
        created: creation time, seconds since the epoch.
        problem: the problem the run was started on (a path or ``kernelbench:LEVEL/ID``).
        proposer, search, objective: how it searches.
        budget: candidates it may judge.
        evaluations: candidates judged so far.
        best_speedup: the fastest correct candidate's speedup over eager; None before one exists.
        best_node: the node written as the run's best (by its objective) once the run ended.
        best_path: the file that candidate was written to; None until the run ended with one.
        failures: judged candidates that were not correct, by status.
        complete: the run ended (it wrote its best, spent its budget, or its search ran dry);
            False for a run still going or one that was stopped and may be resumed.
        verdicts: every verdict in the order judged (filled only when asked for).
    """

    run_id: str
    run_dir: str
    created: float
    problem: str
    proposer: str
    search: str
    objective: str
    budget: int
    evaluations: int
    best_speedup: float | None
    best_node: int | None
    best_path: str | None
    failures: dict[str, int]
    complete: bool
    verdicts: list[Verdict] = field(default_factory=list)


def optimize_runs(runs_dir: str | Path) -> list[OptimizeStatus]:
    """Every optimize run under ``runs_dir``, latest first (empty when the folder does not exist).

    Raises:
        UserError: a run's database cannot be read.
    """
    from loopwise.core.store import list_runs

    metas = [m for m in list_runs(runs_dir) if m.kind == KIND]
    return [_read(runs_dir, meta.run_id, verdicts=False) for meta in reversed(metas)]


def optimize_run(runs_dir: str | Path, run_id: str) -> OptimizeStatus:
    """One optimize run, with every verdict.

    Raises:
        UserError: no such run, or it is not an optimize run.
    """
    return _read(runs_dir, run_id, verdicts=True)


def _read(runs_dir: str | Path, run_id: str, *, verdicts: bool) -> OptimizeStatus:
    from loopwise.core.run import open_run

    with open_run(runs_dir, run_id, KIND) as store:
        settings: dict[str, Any] = {}
        tally, judged, best, ran_dry = Tally(), [], None, False
        for event in store.events():
            payload = event.payload
            if event.kind == "settings" and not settings:
                settings = payload
            elif event.kind == "evaluation":
                verdict = _verdict(payload)
                tally.add(verdict.status, verdict.speedup)
                judged.append(verdict)
            elif event.kind == "best":
                best = payload
            elif event.kind == "ask":
                ran_dry = payload.get("node") is None
        budget = int(settings.get("budget", 0))
        return OptimizeStatus(
            run_id=store.meta.run_id, run_dir=str(store.run_dir), created=store.meta.created,
            problem=str(settings.get("problem", "")), proposer=str(settings.get("proposer", "")),
            search=str(settings.get("search", "")), objective=str(settings.get("objective", "speed")),
            budget=budget, evaluations=tally.evaluations, best_speedup=tally.best,
            best_node=best.get("node") if best else None, best_path=best.get("path") if best else None,
            failures=dict(sorted(tally.failures.items())),
            complete=best is not None or ran_dry or (budget > 0 and tally.evaluations >= budget),
            verdicts=judged if verdicts else [])


def _verdict(payload: dict[str, Any]) -> Verdict:
    data = payload.get("evaluation") or {}
    status = str(data.get("status", "?"))
    speedup = data.get("speedup") if status == "correct" else None
    rejections = [r for r in data.get("reasons") or () if r.get("severity", "reject") == "reject"]
    from loopwise.kernels.evaluate.result import headline

    reason = f"{rejections[0].get('code', '?')}: {headline(rejections[0].get('message') or '')}" if rejections else ""
    return Verdict(node=payload.get("node"), status=status, speedup=speedup, reason=reason)
