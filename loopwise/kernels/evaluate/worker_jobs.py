"""Job handlers of the kernel engine, run by an executor's worker (one per GPU).

A worker keeps one judge per problem and config, so the reference is built and timed once per
problem on that worker's GPU; every candidate still runs in its own fresh sandbox.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_JUDGES: dict[tuple[str, str, str], object] = {}


def _problem(payload: dict):
    """The problem a job carries as source (``problem_source``, ``problem_name``)."""
    from loopwise.kernels.problem import Problem

    source = payload["problem_source"]
    name = payload.get("problem_name", "problem")
    return Problem(name=name, path=Path(f"<{name}>"), source=source, sha256=hashlib.sha256(source.encode()).hexdigest(),
                   level=None, problem_id=None)


def _judge(payload: dict):
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.judge import LocalJudge

    cfg = EvalConfig.model_validate(payload.get("config") or {})
    problem = _problem(payload)
    key = (problem.sha256, cfg.model_dump_json(), payload.get("device", "auto"))
    if key not in _JUDGES:
        _JUDGES[key] = LocalJudge(problem, cfg, device=payload.get("device", "auto"), spares=2)
    return _JUDGES[key]


def evaluate(payload: dict) -> dict:
    """Judges one candidate: ``payload`` holds problem_source, candidate_source, candidate_name,
    and optionally problem_name, config (EvalConfig fields) and device."""
    judge = _judge(payload)
    ev = judge.evaluate(payload["candidate_source"], payload.get("candidate_name", "<candidate>"))
    return ev.model_dump(mode="json")


def reference_facts(payload: dict) -> dict:
    """The device's ceilings and the reference's times and floor on this worker
    (``LocalJudge.reference_facts``): ``payload`` as for ``evaluate`` plus ``compile``."""
    return _judge(payload).reference_facts(bool(payload.get("compile")))


def baseline(payload: dict) -> dict:
    """Times a problem's eager and compiled variants (``kernels baseline``) on this worker's GPU:
    ``payload`` holds problem_source, problem_name, config (a whole loopwise config) and
    optionally device and statistic."""
    from loopwise.config import Config
    from loopwise.kernels.baseline import run_baseline

    cfg = Config.model_validate(payload.get("config") or {})
    row = run_baseline(_problem(payload), cfg, payload.get("device", "auto"))
    return row.to_json_dict(payload.get("statistic", cfg.kernels.eval.statistic))
