"""A plan as JSON data: what ``loopwise memory plan --json`` prints and ``--out`` writes, what a
run records as a candidate's artifact, and what the verifier (:mod:`loopwise.memory.verify`) and
the report read back."""

from __future__ import annotations

from loopwise.memory.plan_records import Group, Plan, Slab


def operator_bounds(graph, capacity_bytes: int) -> list[int]:
    """Each operator's own traffic bound at ``capacity_bytes``, in execution order."""
    from loopwise.memory.graph import operator_bound_bytes

    return [operator_bound_bytes(op, capacity_bytes) for op in graph.operators]


def plan_json(model: str, target, plan: Plan, imported, bounds: list[int], seconds: float,
              imported_as: dict | None = None) -> dict:
    """The plan's JSON data, with its schedule, and its time and energy where the target gives the
    figures for them (``time``: :func:`loopwise.memory.timing.plan_time`, else None).

    Args:
        model: the model as the user named it.
        target: the target (:class:`loopwise.memory.targets.Target`).
        plan: the plan (the planner's, or the layer-by-layer baseline).
        imported: the imported model (:class:`loopwise.memory.imported.Imported`).
        bounds: each operator's own bound (:func:`operator_bounds`).
        seconds: the planning time.
        imported_as: how the model was imported (``batch``, ``seq``, ``elem_bytes``): recorded so
            that the verifier can import it again and check the schedule against its graph.
    """
    from loopwise.memory.timing import operator_work, plan_time, rates

    rows, k = [], 0
    graph_ops = imported.graph.operators
    at = {op.name: n for n, op in enumerate(graph_ops)}  # a plan may have folded some (a prologue)
    for gi, grp in enumerate(plan.groups):
        for name, moved in zip(grp.operators, grp.per_operator):
            flops, engine = operator_work(graph_ops[at[name]])
            rows.append({"operator": name, "group": gi, "plan_bytes": moved,
                         "layer_by_layer_bytes": plan.layer_by_layer[k], "bound_bytes": bounds[at[name]],
                         "flops": flops, "engine": engine, "touched_bytes": plan.touched[k] if plan.touched else 0})
            k += 1
    planned = {name for grp in plan.groups for name in grp.operators}
    data = {"model": str(model), "imported_as": dict(imported_as) if imported_as else None,
            "target": target.name, "total_bytes": plan.total_bytes,
            "compulsory_bytes": plan.compulsory_bytes,
            "operator_bounds_bytes": sum(bounds), "copies_folded": len(imported.folded),
            # the graph's operators run inside the products that read them (a norm's application
            # as their prologue: :mod:`loopwise.memory.prologue`), in no group of their own
            "operators_folded": [op.name for op in graph_ops if op.name not in planned],
            "unsupported": imported.unsupported,
            "layer_by_layer_bytes": plan.layer_by_layer_bytes,
            "ratio_to_compulsory": plan.total_bytes / plan.compulsory_bytes,
            "ratio_to_layer_by_layer": plan.total_bytes / plan.layer_by_layer_bytes,
            "pairs_removed": plan.pairs_removed, "seconds": seconds,
            "planned_capacity_bytes": plan.planned_capacity_bytes or target.scratchpad.bytes,
            "groups": [_group_json(grp) for grp in plan.groups], "operators": rows, "schedule": plan.schedule}
    r = rates(target)
    data["time"] = plan_time(data, r) if r is not None else None
    return data


def compare_objectives(plan: dict, baseline: dict) -> dict | None:
    """Which of the two candidates (the planner's plan and the layer-by-layer baseline, as JSON)
    moves the fewer bytes and which runs in less time; None without times. At equal traffic (or
    time) the planner's plan counts as the better one."""
    if plan.get("time") is None or baseline.get("time") is None:
        return None
    by_traffic = "planner" if plan["total_bytes"] <= baseline["total_bytes"] else "layer-by-layer"
    by_time = "planner" if plan["time"]["seconds"] <= baseline["time"]["seconds"] else "layer-by-layer"
    return {"traffic_optimal": by_traffic, "time_optimal": by_time, "agree": by_traffic == by_time,
            "plan_seconds": plan["time"]["seconds"], "layer_by_layer_seconds": baseline["time"]["seconds"],
            "plan_bytes": plan["total_bytes"], "layer_by_layer_bytes": baseline["total_bytes"]}


def compare_choices(chosen: dict, least_traffic: dict, objective: str) -> dict:
    """Where the plan made for ``objective`` (JSON) groups operators otherwise than the
    least-traffic plan: each stretch of operators between boundaries both plans share whose groups
    (or their slabs) differ, with both plans' groups there; and both plans' time and traffic."""
    def spans(data):
        out, k = {}, 0
        for grp in data["groups"]:
            out[k] = grp
            k += len(grp["operators"])
        return out, k

    a, end = spans(chosen)
    b, _ = spans(least_traffic)
    shared = sorted((set(a) & set(b)) | {end})
    differ = []
    for lo, hi in zip(shared, shared[1:]):
        mine = [a[k] for k in sorted(a) if lo <= k < hi]
        theirs = [b[k] for k in sorted(b) if lo <= k < hi]
        if mine != theirs:
            differ.append({"operators": [mine[0]["operators"][0], mine[-1]["operators"][-1]],
                           f"by_{objective}": [_brief(g) for g in mine], "by_traffic": [_brief(g) for g in theirs]})
    seconds = lambda d: d["time"]["seconds"] if d.get("time") else None  # noqa: E731
    return {"objective": objective, "differ": differ,
            "plan_seconds": seconds(chosen), "plan_bytes": chosen["total_bytes"],
            "least_traffic_seconds": seconds(least_traffic), "least_traffic_bytes": least_traffic["total_bytes"]}


def _brief(grp: dict) -> dict:
    return {"operators": len(grp["operators"]), "first": grp["operators"][0], "runs": describe_runs(grp),
            "traffic_bytes": grp["traffic_bytes"]}


def _group_json(grp: Group) -> dict:
    slab = grp.slab
    return {"operators": list(grp.operators), "traffic_bytes": grp.traffic_bytes, "peak_bytes": grp.peak_bytes,
            "resident": list(grp.resident), "tiled": grp.tiled,
            "carried_in": list(grp.carried_in), "carried_out": list(grp.carried_out),
            "slab": None if slab is None else {
                "size": slab.size, "extent": slab.extent, "count": slab.count,
                "outer_size": slab.outer_size, "outer_extent": slab.outer_extent,
                "outer_dims": list(slab.outer_dims) if slab.outer_dims else None,
                "dims": list(slab.dims), "resident": list(slab.resident),
                "streamed": list(slab.streamed), "loops": list(slab.loops),
                "key_dims": list(slab.key_dims) if slab.key_dims else None, "key_extent": slab.key_extent,
                "key_size": slab.key_size, "batch_dims": list(slab.batch_dims) if slab.batch_dims else None,
                "batch_extent": slab.batch_extent, "batch_size": slab.batch_size}}


def describe_runs(group: dict) -> str:
    """How a group (as JSON) runs: ``tiled``, ``whole`` or its slabs (:meth:`Slab.describe`)."""
    if group["tiled"]:
        return "tiled"
    s = group["slab"]
    if s is None:
        return "whole"
    outer = tuple(s["outer_dims"]) if s["outer_dims"] else None
    return Slab(tuple(s["dims"]), s["extent"], s["size"], tuple(s["resident"]), tuple(s["streamed"]), outer,
                s["outer_extent"], s["outer_size"], tuple(s.get("loops", ())),
                tuple(s["key_dims"]) if s.get("key_dims") else None, s.get("key_extent", 1),
                s.get("key_size", 1), tuple(s["batch_dims"]) if s.get("batch_dims") else None,
                s.get("batch_extent", 1), s.get("batch_size", 1)).describe()
