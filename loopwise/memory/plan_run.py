"""How a memory plan runs: the planner proposes, the verifier judges, the run records.

1. The model is imported and its bounds recorded (compulsory traffic, each operator's own bound).
2. The planner proposes candidates: its whole-model plan (an exact dynamic program over groupings,
   :mod:`loopwise.memory.planner`) and the layer-by-layer baseline it evaluated on the way. What it
   found for each operator is recorded as it goes (``searched`` events), so a stopped search
   continues at the first operator not recorded. Each candidate's plan JSON, with its schedule, is
   stored as an artifact.
3. The verifier (:mod:`loopwise.memory.verify`) replays every candidate independently; its
   verdict is recorded: ``accepted``, or ``rejected`` with its violations.
4. A search of :mod:`loopwise.core.search` chooses among the candidates: the baseline is its root,
   the planner's plan a child told its traffic reduction (layer-by-layer bytes over its bytes), or a
   failure when the verifier rejected it. Its best node is the run's result.

Every step is recorded before the next starts; a resumed run skips what its store holds, so
nothing recorded is computed again (the model is imported again when the planner has work left).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable

from loopwise.memory import verify as judge

BASELINE = "layer-by-layer"
PLANNER = "planner"
CANDIDATES = (BASELINE, PLANNER)
ACCEPTED, REJECTED = "accepted", "rejected"


@dataclass
class PlanOutcome:
    """What a plan run found.

    Attributes:
        status: ``accepted`` when the planner's plan passed its replay, else ``rejected``.
        data: the planner's plan JSON (with its schedule) when accepted, else None.
        verdicts: each candidate's recorded verdict.
    """

    status: str
    data: dict | None
    verdicts: dict[str, dict]


def resolve_inputs(model: str, target: str, elem_bytes: int, batch: int, seq: int | None,
                   objective: str = "traffic") -> dict:
    """The inputs a run records: as given, with the target resolved (a YAML file may change later).
    ``objective``: what the planner minimizes, ``traffic`` or ``time`` (the roofline time, which
    needs the target's compute figures)."""
    from loopwise.errors import UserError
    from loopwise.memory.planner import OBJECTIVES
    from loopwise.memory.targets import load_target
    from loopwise.memory.timing import rates

    if objective not in OBJECTIVES:
        raise UserError(f"--objective {objective}: one of {', '.join(OBJECTIVES)}")
    tgt = load_target(target)
    if objective == "time" and rates(tgt) is None:
        raise UserError(f"--objective time: target {tgt.name} gives no compute figures, so a plan has no time there")
    return {"model": str(model), "target": target, "target_resolved": tgt.model_dump(mode="json"),
            "elem_bytes": elem_bytes, "batch": batch, "seq": seq, "objective": objective}


def run_plan(store, inputs: dict, load: Callable, progress: Callable | None = None) -> PlanOutcome:
    """Runs (or continues) the plan run held by ``store``.

    Args:
        store: the run's store.
        inputs: the run's inputs (:func:`resolve_inputs`).
        load: ``load(model, elem_bytes, batch, seq) -> Imported``, the model importer.
        progress: ``progress(done, total)`` as the planner searches operators.
    """
    candidates = store.latest_by_key("candidate")
    imported = None
    if any(name not in candidates for name in CANDIDATES):
        imported = load(inputs["model"], inputs["elem_bytes"], inputs["batch"], inputs["seq"])
        _propose(store, inputs, imported, progress)
        candidates = store.latest_by_key("candidate")
    verdicts = {k: e.payload for k, e in store.latest_by_key("verdict").items()}
    for name in CANDIDATES:
        if name not in verdicts:
            if imported is None:  # the judge checks the schedule against the model's graph
                imported = load(inputs["model"], inputs["elem_bytes"], inputs["batch"], inputs["seq"])
            verdicts[name] = _judge(store, name, candidates[name].payload, imported.graph)
    result = store.latest_by_key("result").get("result")
    if result is None:
        result = _choose(store, candidates, verdicts)
    else:
        result = result.payload
    data = None
    if result["status"] == ACCEPTED:
        data = json.loads(store.get_artifact(candidates[PLANNER].payload["plan"]))
    return PlanOutcome(result["status"], data, verdicts)


def _propose(store, inputs: dict, imported, progress) -> None:
    """The planner's candidates, with the model's bounds, recorded."""
    from loopwise.memory.plan_json import compare_choices, compare_objectives, operator_bounds, plan_json
    from loopwise.memory.planner import plan, plan_with_baseline
    from loopwise.memory.targets import Target
    from loopwise.memory.timing import rates

    tgt = Target.model_validate(inputs["target_resolved"])
    g = imported.graph
    capacity = tgt.scratchpad.bytes
    searched = {int(i): state for e in store.events(kind="searched") for i, state in e.payload["operators"].items()}
    objective, r = inputs.get("objective", "traffic"), rates(tgt)
    t0 = time.perf_counter()
    with _SearchLog(store) as log:
        best, baseline = plan_with_baseline(g, capacity, progress=progress, searched=searched, on_searched=log.add,
                                            objective=objective, rates=r)
    seconds = round(time.perf_counter() - t0, 2)
    bounds = operator_bounds(g, capacity)
    store.append("bounds", {"compulsory_bytes": g.compulsory_bytes(),
                            "layer_by_layer_floor_bytes": g.layer_by_layer_floor_bytes(),
                            "operator_bounds_bytes": sum(bounds), "capacity_bytes": capacity,
                            "per_operator": [[op.name, b] for op, b in zip(g.operators, bounds)]}, key="bounds")
    imported_as = {k: inputs[k] for k in ("batch", "seq", "elem_bytes")}
    datas = {name: plan_json(inputs["model"], tgt, candidate, imported, bounds, seconds, imported_as)
             for name, candidate in ((BASELINE, baseline), (PLANNER, best))}
    datas[PLANNER]["objectives"] = compare_objectives(datas[PLANNER], datas[BASELINE])
    datas[PLANNER]["objective"] = objective
    if objective != "traffic":
        # the least-traffic plan beside it, to say where the objective chose otherwise
        other = plan_json(inputs["model"], tgt, plan(g, capacity), imported, bounds, seconds, imported_as)
        datas[PLANNER]["choices"] = compare_choices(datas[PLANNER], other, objective)
    for name, candidate in ((BASELINE, baseline), (PLANNER, best)):
        data = datas[name]
        sha = store.put_artifact(json.dumps(data), name=f"{name}.plan.json", media_type="application/json")
        store.append("candidate", {"name": name, "plan": sha, "total_bytes": candidate.total_bytes,
                                   "groups": len(candidate.groups), "pairs_removed": candidate.pairs_removed,
                                   "seconds": seconds}, key=name)


class _SearchLog:
    """Records the planner's search operator by operator, a batch at a time (every append is
    synced to disk, so one per operator would slow a large model down); a batch still open when
    the search stops is recorded on the way out."""

    def __init__(self, store, every_s: float = 1.0) -> None:
        self.store, self.every_s = store, every_s
        self.batch: dict[str, dict] = {}
        self.last = time.monotonic()

    def add(self, i: int, state: dict) -> None:
        self.batch[str(i)] = state
        if time.monotonic() - self.last >= self.every_s:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            self.store.append("searched", {"operators": self.batch})
            self.batch = {}
        self.last = time.monotonic()

    def __enter__(self) -> _SearchLog:
        return self

    def __exit__(self, *exc) -> None:
        self.flush()


def _judge(store, name: str, candidate: dict, graph) -> dict:
    """The verifier's verdict on one candidate, against the model's ``graph`` (the importer's),
    recorded."""
    data = json.loads(store.get_artifact(candidate["plan"]))
    try:
        verdict = judge.verify(data, graph)
        payload = {**judge.as_dict(verdict), "summary": judge.describe(verdict, limit=3)}
    except judge.PlanFormatError as exc:
        payload = {"ok": False, "summary": [f"FAIL: {exc}"],
                   "violations": [{"kind": "format", "where": "plan", "message": str(exc)}]}
    payload = {"name": name, "status": ACCEPTED if payload["ok"] else REJECTED, **payload}
    store.append("verdict", payload, key=name)
    return payload


def _choose(store, candidates: dict, verdicts: dict) -> dict:
    """The best verified candidate, chosen by a core search over the candidates; recorded.

    The planner's plan is the result when the verifier accepts it: its grouping search includes
    every operator alone, so it never moves more than the baseline (on a tie the search keeps the
    baseline, the root, as its best; the two move the same bytes).
    """
    from loopwise.core.search import BestOfN, Outcome, Status

    search = BestOfN()
    baseline_bytes = candidates[BASELINE].payload["total_bytes"]
    plan_bytes = candidates[PLANNER].payload["total_bytes"]
    best = None
    if verdicts[BASELINE]["status"] == ACCEPTED:
        search.add_root(BASELINE, payload=BASELINE)
        child = search.add_child(0, PLANNER, payload=PLANNER, note="grouping")
        if verdicts[PLANNER]["status"] == ACCEPTED and plan_bytes > 0:
            search.tell(child, Outcome(Status.CORRECT, baseline_bytes / plan_bytes))
        else:  # the replay contradicts what the plan claims: its numbers are wrong
            search.tell(child, Outcome(Status.WRONG_OUTPUT))
        best = search.best().payload
    accepted = verdicts[PLANNER]["status"] == ACCEPTED
    payload = {"status": ACCEPTED if accepted else REJECTED, "best_verified": best,
               "plan": candidates[PLANNER].payload["plan"] if accepted else None,
               "total_bytes": plan_bytes if accepted else None,
               "layer_by_layer_bytes": baseline_bytes}
    store.append("result", payload, key="result")
    return payload
