"""A whole-model plan: consecutive operators grouped so that the tensors passed between them stay
in the scratchpad instead of going out to DRAM and back.

Model. Operators run in the graph's execution order. A *group* is a run of consecutive operators
executed whole (one tile each) while their intermediates stay resident: a tensor produced and
consumed inside the group never touches DRAM; a tensor the group reads from outside is loaded once
(its exact footprint over the group); a tensor it produces that a later group or the model's
output needs is stored once. A group fits when, at every operator, that operator's tensors plus
the group's intermediates still alive across it fit the scratchpad (weights and inputs are loaded
just in time, so they count only at the operators that use them). An operator alone that does not
fit whole runs with its best tiling (:mod:`loopwise.memory.layerwise`).

Search. Over this model the best grouping is a shortest path over the operator sequence (dynamic
programming over group boundaries, groups of up to ``max_group`` operators): exact for contiguous
groups, at a cost quadratic in the number of operators, which a whole ResNet-50 keeps small. Fusion
across non-consecutive operators and tiled fusion (a group whose intermediates are kept tile by
tile) are not modelled yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopwise.memory.graph import Graph
from loopwise.memory.layerwise import best_tiling
from loopwise.memory.polyhedral import footprint, touched


@dataclass(frozen=True)
class Group:
    operators: tuple[str, ...]
    traffic_bytes: int
    peak_bytes: int  # the scratchpad it needs (for a tiled singleton: its tile's buffers)
    resident: tuple[str, ...]  # intermediates that never touch DRAM
    tiled: bool = False


@dataclass(frozen=True)
class Plan:
    groups: tuple[Group, ...]
    total_bytes: int
    compulsory_bytes: int
    layer_by_layer_bytes: int
    pairs_removed: int  # store -> load pairs through DRAM the grouping removes
    evaluated: int = field(default=0, compare=False)


def _tensor_facts(graph: Graph):
    """Per operator: {tensor: (bytes touched, read?, written?)}; and where each tensor is used."""
    facts, uses = [], {}
    for i, op in enumerate(graph.operators):
        reads = {a.tensor for a in op.reads}
        writes = {a.tensor for a in op.writes}
        mine = {}
        for t in op.tensors:
            mine[t.name] = (footprint(op, t.name, {}) * t.elem_bytes, t.name in reads, t.name in writes)
            uses.setdefault(t.name, []).append(i)
        facts.append(mine)
    return facts, uses


def plan(graph: Graph, capacity_bytes: int, max_group: int = 64) -> Plan:
    """The grouping of ``graph``'s operators with the least DRAM traffic under ``capacity_bytes``."""
    ops = graph.operators
    n = len(ops)
    facts, uses = _tensor_facts(graph)
    outputs = set(graph.outputs())
    singles: dict[int, Group] = {}
    unions: dict[tuple, int] = {}
    evaluated = 0

    def single(i: int) -> Group:
        nonlocal evaluated
        if i not in singles:
            choice = best_tiling(ops[i], capacity_bytes)
            evaluated += choice.evaluated
            singles[i] = Group((ops[i].name,), choice.traffic_bytes, choice.buffer_bytes, (),
                               tiled=choice.buffer_bytes < sum(b for b, _, _ in facts[i].values()))
        return singles[i]

    def group(i: int, j: int) -> Group | None:
        """Operators i..j-1 run whole with their intermediates resident; None if it does not fit."""
        members = range(i, j)
        produced = {t: k for k in members for t, (_, _, w) in facts[k].items() if w}
        resident = sorted(t for t in produced if t not in outputs and all(i <= u < j for u in uses[t]))
        traffic = 0
        for t in sorted({t for k in members for t in facts[k]}):
            if t in resident:
                continue
            if t in produced:  # stored once, for a later group or the model's output
                traffic += facts[produced[t]][t][0]
            else:  # loaded once: everything the group's readers touch
                traffic += read_union(t, [k for k in members if t in facts[k] and facts[k][t][1]])
        # tensors loaded from outside and read again later in the group stay between their readers
        kept_in = {t: [k for k in members if t in facts[k]] for k in members for t in facts[k] if t not in produced}
        kept_in = {t: (ks[0], ks[-1]) for t, ks in kept_in.items() if len(ks) > 1}
        peak = 0
        for k in members:  # this operator's tensors, plus what the group holds across it
            alive = sum(facts[produced[t]][t][0] for t in produced
                        if t not in facts[k] and produced[t] < k and any(k < u < j for u in uses[t]))
            alive += sum(max(facts[r][t][0] for r in span) for t, span in kept_in.items()
                         if t not in facts[k] and span[0] < k < span[1])
            peak = max(peak, alive + sum(b for b, _, _ in facts[k].values()))
        if peak > capacity_bytes:
            return None
        return Group(tuple(ops[k].name for k in members), traffic, peak, tuple(resident))

    def read_union(t: str, readers: list[int]) -> int:
        if len(readers) == 1:
            return facts[readers[0]][t][0]
        key = (t, tuple(readers))
        if key not in unions:
            union = None
            for k in readers:
                part = touched(ops[k], t, {})
                union = part if union is None else union.union(part)
            unions[key] = int(union.count_val().to_python()) * graph.tensors()[t].elem_bytes
        return unions[key]

    best: list[tuple[int, list[Group]]] = [(0, [])] + [(0, [])] * n
    for j in range(1, n + 1):
        options = [(best[j - 1][0] + single(j - 1).traffic_bytes, best[j - 1][1] + [single(j - 1)])]
        for i in range(max(0, j - max_group), j - 1):
            g = group(i, j)
            if g is not None:
                options.append((best[i][0] + g.traffic_bytes, best[i][1] + [g]))
        best[j] = min(options, key=lambda o: o[0])
    total, groups = best[n]
    layer = sum(single(i).traffic_bytes for i in range(n))
    removed = sum(len(g.resident) for g in groups)
    return Plan(tuple(groups), total, graph.compulsory_bytes(), layer, removed, evaluated)
