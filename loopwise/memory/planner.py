"""A whole-model plan: consecutive operators grouped so that the tensors passed between them stay
in the scratchpad instead of going out to DRAM and back, run whole or slab by slab.

Model. Operators run in the graph's execution order. A *group* is a run of consecutive operators
whose intermediates never touch DRAM. It runs in one of two ways:

- *whole*: each operator once, on its whole tensors;
- *in slabs*: the group's loop nests are cut along one dimension they share (the batch, the
  tokens, the query rows of an attention), and the whole chain of operators runs on slab 1, then
  slab 2, ... A tensor *sliced* by that dimension (it is indexed by the slab dimension alone, in one
  of its own dimensions, by every operator of the group that touches it) is moved once, however
  many slabs there are; a tensor the slab dimension does not index (a weight, the keys of an
  attention) is *invariant*: either kept resident for all slabs (loaded once) or streamed (loaded
  again by every slab). A dimension an operator reduces over, or that one output element depends on
  whole (a softmax row: ``Operator.coupled``), or that reaches a tensor through anything but the
  plain index (a convolution's halo), cannot carry slabs. An intermediate must be sliced the same
  way by its producer and every consumer, or the group cannot run in slabs;
- in slabs within slabs: an outer dimension (one sequence at a time) and an inner one (a block of
  its query rows): a tensor sliced by the outer dimension only (that sequence's keys and values) is
  an invariant of the inner slabs, kept for them or loaded again by each. The outer dimension may
  also be a product's columns outside its rows: a chunk of the weight stays for all the rows while
  the input, read whole by every chunk, streams past it once per chunk; products reading one
  input (q, k and v) take their chunks in one loop, so the input is read once per chunk of all;
- an attention's softmax chain alone, key block by key block inside its query blocks, with an
  online softmax (:mod:`loopwise.memory.key_blocks`): the scores never leave the chip even where
  one head's keys do not fit;
- in several inner loops within one outer slab: where an operator needs all of what the loop so
  far made (the attention after the projection that made its keys row block by row block), a new
  loop over the same extent starts once every slab of the one before has run; a tensor used in
  more than one loop is held at the outer slab's size (:mod:`loopwise.memory.segments`).

A tensor the group reads from outside is loaded once per pass (its exact footprint over the group's
readers); one it produces that a later group or the model's output needs is stored once. A group
fits when, at every operator, what is alive there (the operator's tensors, the intermediates and
inputs held between their first and last use in the group, and the resident invariants) fits the
scratchpad, with sliced tensors counted at the slab's size. An operator that fits no group runs
alone with its best tiling (:mod:`loopwise.memory.layerwise`).

Between groups, a set of the tensors crossing a boundary can stay on chip (held whole) instead of
being stored and loaded again, when the group after uses them up and the group before made them
all: every crossing tensor where they fit together, else those the operator before the boundary
made (:func:`loopwise.memory.grouping.carry_sets`; the others go through DRAM). In a group run
whole such a tensor is held from its producer on, or until its last reader; in a group run in
slabs it is held through the whole loop, since the slabs already made stay on chip for the rest
of it and every later slab reads what was carried in. An operator alone, tiled, carries its output
out where its tiling holds the whole output as one accumulator (:mod:`loopwise.memory.tiled_carry`).

An elementwise operator that applies small broadcast tensors (a norm's statistic and weight) to
its input is folded into the products that read its output, which apply it to each operand tile
they load (:mod:`loopwise.memory.prologue`); the layer-by-layer baseline keeps it. An elementwise
operator after a tiled product whose output nothing else reads runs on each output tile as the
product finishes it (:mod:`loopwise.memory.epilogue`).

The operators the groups are made of are the graph's, strip-mined where a reader reads a product's
output block by block (:mod:`loopwise.memory.strip_mine`): a projection then offers a loop over the
heads, so it and what reads it per head can run head by head. An operator alone is tiled as the
graph has it.

Search. Over this model the best grouping is a shortest path over the operator sequence: dynamic
programming over group boundaries, each boundary with or without its crossing tensors kept on chip
(exact for contiguous groups), where each candidate group takes
its best way to run: whole, or the largest slab that fits for each slab dimension the chain admits
(found by propagating the first operator's dimension, or pair of dimensions, through the tensors it
shares with the next),
with the largest invariants made resident first while they fit. Groups are extended only while
they can still fit, which keeps a whole ResNet-50 or GPT-2 within seconds. The dynamic program
runs as operators are searched, so a group in slabs whose traffic cannot go below what already
reaches its end is not sized (:mod:`loopwise.memory.grouping`); the plan is the one sizing every
group gives.

Objective. The grouping minimizes DRAM traffic, or (``objective="time"``) the sum of each group's
roofline time: the larger of its operators' compute time on the target and its transfers at the
DRAM bandwidth, ties going to the fewer bytes (:meth:`_Planner.cost`).
"""

from __future__ import annotations

import bisect
from dataclasses import replace

import numpy as np

from loopwise.memory.epilogue import epilogue_group
from loopwise.memory.graph import Graph
from loopwise.memory.group_tally import tally, units, with_carries
from loopwise.memory.grouping import CANNOT_BEAT, OBJECTIVES, carry_sets, close, slab_group
from loopwise.memory.key_blocks import chain_spans, key_blocked
from loopwise.memory.plan_records import Group, Plan
from loopwise.memory.polyhedral import count, footprint, touched
from loopwise.memory.prologue import fold_prologues, folded, prologue_tiling
from loopwise.memory.schedule import build_schedule
from loopwise.memory.schedule_loops import static_steps
from loopwise.memory.segments import MAX_LOOPS, agreement, fresh_dims, segments, written
from loopwise.memory.slab_floor import slab_floor
from loopwise.memory.slabs import best_slab, slab_signatures
from loopwise.memory.strip_mine import split_loops, strip_mined
from loopwise.memory.tiled_carry import kept_tiled


def plan(graph: Graph, capacity_bytes: int, max_group: int = 512, progress=None, objective: str = "traffic",
         rates=None) -> Plan:
    """The grouping of ``graph``'s operators with the least DRAM traffic under ``capacity_bytes``,
    or (``objective="time"``, with the target's :class:`loopwise.memory.timing.Rates`) the least
    roofline time (:meth:`_Planner.cost`); ``progress(done, total)`` is called as operators are searched."""
    return plan_with_baseline(graph, capacity_bytes, max_group, progress, objective=objective, rates=rates,
                              baseline=False)[0]


def plan_with_baseline(graph: Graph, capacity_bytes: int, max_group: int = 512, progress=None,
                       searched: dict[int, dict] | None = None, on_searched=None, objective: str = "traffic",
                       rates=None, baseline: bool = True) -> tuple[Plan, Plan | None]:
    """The plan of :func:`plan` and the layer-by-layer baseline as a plan of its own (every operator
    alone with its best tiling, with its schedule), both from one search: the baseline's groups are
    the single operators the search evaluated anyway. ``searched`` and ``on_searched``: as in
    :meth:`_Planner.run`, to continue a stopped search; ``objective``, ``rates``: as in :func:`plan`.

    Where the graph has norm applications to fold into their products
    (:mod:`loopwise.memory.prologue`), the graph is planned twice, as it is and with them folded,
    and the better plan is kept (a folded norm's input is read again by each product, which costs
    more where the normalized tensor could have stayed on chip); the search of the folded graph is
    not recorded (``on_searched``), so a resumed run searches it again."""
    planner = _Planner(graph, capacity_bytes, max_group, objective=objective, rates=rates, prologues=False)
    best = planner.run(progress, searched, on_searched)
    base = planner.baseline() if baseline else None
    if fold_prologues(graph) is not graph:  # something to fold: a second planner (its set-up is not free)
        other = _Planner(graph, capacity_bytes, max_group, objective=objective, rates=rates)
        found = other.run(progress)
        if other.total(found) < planner.total(best):
            planner, best = other, found
    if base is not None:
        best = replace(best, layer_by_layer_bytes=base.layer_by_layer_bytes)
    return _placed(planner, best), base


def _placed(first_planner: _Planner, best: Plan, attempts: int = 8) -> Plan:
    """``best``, or when its buffers do not fit the scratchpad by offsets although they fit by bytes
    (the holes first fit leaves: :mod:`loopwise.memory.placement`), the plan for a scratchpad
    smaller by what they overflow, by at most a tenth of the scratchpad per attempt (one group's
    large overflow must not take that much room from every other group), placed in the whole
    scratchpad; the capacity planned for is recorded in the plan (``planned_capacity_bytes``);
    the layer-by-layer figures stay those of the whole scratchpad. When no attempt places, the
    layer-by-layer plan (every operator alone), which does: never a plan that does not place."""
    p = first_planner
    graph, capacity, max_group = p.source, p.cap, p.max_group
    budget, first = capacity, best
    for attempt in range(attempts + 1):
        top = max((a[3] + a[4] for g in best.schedule["groups"] for step, _ in static_steps(g["steps"])
                   for a in step["alloc"]), default=0)
        if top <= capacity:
            return best
        if attempt == attempts:
            break
        budget -= min(max(top - capacity, capacity // 100), capacity // 10)
        planner = _Planner(graph, budget, max_group, scratchpad=capacity, objective=p.objective, rates=p.rates,
                           prologues=p.g is not graph)
        best = replace(planner.run(), planned_capacity_bytes=budget,
                       layer_by_layer_bytes=first.layer_by_layer_bytes, layer_by_layer=first.layer_by_layer)
    return replace(p.baseline(), layer_by_layer_bytes=first.layer_by_layer_bytes, layer_by_layer=first.layer_by_layer)


class _Planner:
    def __init__(self, graph: Graph, capacity: int, max_group: int, scratchpad: int | None = None,
                 objective: str = "traffic", rates=None, prologues: bool = True) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r}: one of {', '.join(OBJECTIVES)}")
        if objective == "time" and rates is None:
            raise ValueError("the time objective needs the target's rates (its bandwidth and compute)")
        self.objective, self.rates = objective, rates
        # norm applications folded into their products (:mod:`loopwise.memory.prologue`)
        self.source = graph
        graph, self.prologues = folded(graph) if prologues else (graph, {})
        self.g, self.cap, self.max_group = graph, capacity, max_group
        self.scratchpad = capacity if scratchpad is None else scratchpad  # where its buffers are placed
        self.alone_ops = graph.operators  # as each runs alone, tiled (:mod:`loopwise.memory.layerwise`)
        self.ops = strip_mined(graph.operators)  # the same points, with the loops a block-wise reader needs
        self.names = tuple(op.name for op in self.ops)
        self.compute_s = {}  # each operator's compute time on the target (the time objective)
        if rates is not None:
            from loopwise.memory.timing import operator_work

            for op in self.ops:
                flops, engine = operator_work(op)
                self.compute_s[op.name] = flops / (rates.matrix_flops if engine == "matrix" else rates.vector_flops)
        self.zero, self.inf = (0, float("inf")) if objective == "traffic" else ((0.0, 0), (float("inf"), float("inf")))
        self.outputs = set(graph.outputs())
        self.facts, self.uses = [], {}
        for i, op in enumerate(self.ops):
            reads = {a.tensor for a in op.reads}
            writes = {a.tensor for a in op.writes}
            self.facts.append({t.name: (footprint(op, t.name, {}) * t.elem_bytes, t.name in reads, t.name in writes)
                               for t in op.tensors})
            for t in op.tensors:
                self.uses.setdefault(t.name, []).append(i)
        self.sigs = [slab_signatures(op) for op in self.ops]
        self.chains = chain_spans(graph)  # attention softmax chains that may run in key blocks
        self.readers: dict[str, tuple[int, ...]] = {}
        for k, fact in enumerate(self.facts):
            for t, (_, r, _) in fact.items():
                if r:
                    self.readers[t] = self.readers.get(t, ()) + (k,)
        # crossing[b]: tensors made by an operator before b and used at or after b (what a group
        # boundary at b sends through DRAM, or keeps on chip)
        producer: dict[str, int] = {}
        for k, fact in enumerate(self.facts):
            for t, (_, _, w) in fact.items():
                if w:
                    producer.setdefault(t, k)
        self.producer = producer
        n = len(self.ops)
        self.crossing = [sorted(t for t, p in producer.items() if p < b <= self.uses[t][-1]) for b in range(n + 1)]
        made = {t: self.facts[k][t][0] for t, k in producer.items()}
        self.carry_sets = [carry_sets(self.crossing[b], producer, self.uses, b, made, capacity) for b in range(n + 1)]
        self.unions: dict[tuple, int] = {}
        self.loads: dict[tuple[str, int, int], int | None] = {}
        self.tallied: tuple = (None, None)  # the last group tallied (its ways with carries come next)
        self.singles: dict[int, Group] = {}
        self.choices: dict[int, object] = {}  # each single's tiling, for its schedule
        self.epilogues: dict[int, tuple | None] = {}  # operator i tiled with its epilogue: (group, how)
        self.evaluated = 0

    # -- the pieces -------------------------------------------------------------------------
    def cost(self, grp: Group):
        """What the grouping adds up and minimizes: a group's traffic, or for the time objective
        (its roofline time, its traffic): the larger of its operators' compute time and its
        transfers at the DRAM bandwidth, ties going to the fewer bytes. At a fixed compute time the
        least traffic is also the least roofline time, so a group's slab size is the same under
        both objectives; the groupings can differ, where traffic hidden under compute costs no time."""
        if self.objective == "traffic":
            return grp.traffic_bytes
        names = grp.operators if isinstance(grp, Group) else self.names[grp.start:grp.end]  # or one recorded
        compute = sum(self.compute_s[name] for name in names)
        return (max(compute, grp.traffic_bytes / self.rates.dram_bytes_per_s), grp.traffic_bytes)

    def total(self, found: Plan):
        """What :meth:`cost` adds up over the plan's groups."""
        out = self.zero
        for grp in found.groups:
            out = self._plus(out, self.cost(grp))
        return out

    def _plus(self, a, b):
        return a + b if self.objective == "traffic" else (a[0] + b[0], a[1] + b[1])

    def single(self, i: int) -> Group:
        if i not in self.singles:
            choice = prologue_tiling(self.alone_ops[i], self.prologues.get(self.alone_ops[i].name, ()), self.cap)
            self.choices[i] = choice
            self.evaluated += choice.evaluated
            whole = sum(b for b, _, _ in self.facts[i].values())
            self.singles[i] = Group((self.ops[i].name,), choice.traffic_bytes, choice.buffer_bytes, (),
                                    tiled=choice.buffer_bytes < whole, occupancy=(choice.buffer_bytes,),
                                    per_operator=(choice.traffic_bytes,))
        return self.singles[i]

    def _readers_in(self, t: str, first: int, last: int) -> tuple[int, ...]:
        """The operators in first..last that read ``t``."""
        readers = self.readers.get(t, ())
        return readers[bisect.bisect_left(readers, first):bisect.bisect_right(readers, last)]

    def _loaded(self, t: str, first: int, last: int) -> int | None:
        """Bytes of ``t`` its readers in first..last touch together; None when none reads it."""
        key = (t, first, last)
        if key not in self.loads:
            readers = self._readers_in(t, first, last)
            self.loads[key] = self.read_union(t, readers) if readers else None
        return self.loads[key]

    def read_union(self, t: str, readers) -> int:
        if len(readers) == 1:
            return self.facts[readers[0]][t][0]
        key = (t, tuple(readers))
        if key not in self.unions:
            union = None
            for k in readers:
                part = touched(self.ops[k], t, {})
                union = part if union is None else union.union(part)
            self.unions[key] = count(union) * self.g.tensors()[t].elem_bytes
        return self.unions[key]

    def _units(self, i: int, j: int, spec: list[tuple[str | None, str]] | None):
        """The group's tensors (:func:`loopwise.memory.group_tally.units`)."""
        return units(self, i, j, spec)

    def evaluate(self, i: int, j: int, spec: list[tuple[str | None, str]] | None, extent: int,
                 outer_extent: int = 1, carry_in: int = 0, carry_out: int = 0, units=None,
                 beat: int | None = None) -> Group | None:
        """Operators i..j-1 as one group: whole (``spec`` None), or in slabs over the inner
        dimension, within slabs over the outer one when ``spec`` names one; None if it cannot fit.
        ``carry_in``: the tensors crossing into the group are still on chip (the group before kept
        them), so they are not loaded; ``carry_out``: those crossing out stay on chip for the next
        group instead of being stored; each names which of the boundary's carried sets
        (:func:`~loopwise.memory.grouping.carry_sets`; 0: none; True counts as 1). A carried
        tensor is held whole. ``units``: the group's
        tensors when the caller has them already (:meth:`_units`). ``beat``: in slabs, the traffic
        to go below; :data:`CANNOT_BEAT` comes back, unsized, when the group's cannot."""
        units = units if units is not None else self._units(i, j, spec)
        if units is None:
            return None
        carried_in = set(self.carry_sets[i][int(carry_in)])
        carried_out = set(self.carry_sets[j][int(carry_out)])
        key = (i, j, None if spec is None else tuple(spec))
        if self.tallied[0] != key:
            self.tallied = (key, tally(self, i, j, spec, units))
        got = self.tallied[1]
        if carried_in or carried_out:
            got = with_carries(self, got, i, j, spec, units, carried_in, carried_out)
        moved, outer_moved, resident_t = got.moved, got.outer_moved, got.resident
        charged, outer_charged, held = got.charged, got.outer_charged, got.held
        if spec is not None and beat is not None and moved + outer_moved + got.loaded_once >= beat:
            return CANNOT_BEAT  # at least one slab, one outer slab, every invariant loaded once
        loops = segments(self, i, spec) if spec is not None else ()
        if spec is not None and beat is not None and slab_floor(
                self.cap, moved, outer_moved, held, got.invariant_table(), extent, outer_extent, got.handed,
                loops) - 0.5 >= beat:
            return CANNOT_BEAT  # not even its floor goes below: no slab size needs weighing
        names = self.names[i:j]
        if spec is None:
            peak = int(held["whole"].max())
            if peak > self.cap:
                return None
            return Group(names, moved, peak, tuple(sorted(resident_t)), occupancy=tuple(held["whole"].astype(np.int64).tolist()),
                         per_operator=tuple(charged.astype(np.int64).tolist()), carried_in=tuple(sorted(carried_in)),
                         carried_out=tuple(sorted(carried_out)))
        grp = best_slab(self.cap, names, moved, outer_moved, held, got.invariant_table(), spec, extent, outer_extent,
                        tuple(sorted(resident_t)), charged, outer_charged, loops, got.handed)
        if grp is None or not (carried_in or carried_out):
            return grp
        return replace(grp, carried_in=tuple(sorted(carried_in)), carried_out=tuple(sorted(carried_out)))

    # -- search -------------------------------------------------------------------------------
    def _seeds(self, i: int) -> list[tuple[str | None, str, int, int]]:
        """(outer, inner, inner extent, outer extent) slab choices for the group's first operator:
        every dimension alone, and every pair whose outer dimension indexes the written tensor in an
        earlier position (the batch outside the rows), or is the block loop of a strip-mined
        dimension (one head's columns outside the rows: :mod:`loopwise.memory.strip_mine`), or
        slices an input the inner one does not (a chunk of a weight's columns held while the rows
        stream past it); the place within a block is not a seed."""
        op, sigs = self.ops[i], self.sigs[i]
        pairs = split_loops(self.alone_ops[i], op)
        blocks, places = {b for b, _ in pairs}, {p for _, p in pairs}
        written = op.writes[0].tensor
        read = {a.tensor for a in op.reads}
        # a place in a block does not carry slabs (the block loop cuts the same columns whole)
        dims = [d for d in sigs if op.dims[d] > 1 and d not in places]
        seeds = [(None, d, op.dims[d], 1) for d in dims]
        for outer in dims:
            for inner in dims:
                if outer != inner and (sigs[outer][written] < sigs[inner][written] or outer in blocks
                                       or any(sigs[outer][t] is not None and sigs[inner][t] is None for t in read)):
                    seeds.append((outer, inner, op.dims[inner], op.dims[outer]))
        return seeds

    def _consistent(self, state: dict[str, int], k: int, extent: int, produced: set[str], exclude=None) -> list:
        """Dimensions of operator k that slice the tensors sliced so far the same way, best first."""
        options = []
        for d, sig in self.sigs[k].items():
            if self.ops[k].dims[d] != extent or d == exclude:
                continue
            agree = agreement(sig, state, produced)
            if agree is not None:
                options.append((agree, d))
        return [d for _, d in sorted(options, key=lambda o: -o[0])]

    def _carries(self, i: int, j: int) -> list[tuple[int, int]]:
        """The ways group i..j-1 can meet its neighbours, by carried set
        (:func:`~loopwise.memory.grouping.carry_sets`): carrying a set in is possible when every
        tensor of it is used up inside the group; carrying one out when the group made every
        tensor of it."""
        n = len(self.ops)
        cin = [0] + [k for k, kept in enumerate(self.carry_sets[i]) if k and i > 0
                     and all(self.uses[t][-1] < j for t in kept)]
        cout = [0] + [k for k, kept in enumerate(self.carry_sets[j]) if k and j < n
                      and all(i <= self.producer[t] for t in kept)]
        return [(a, b) for a in cin for b in cout]

    def candidates(self, i: int) -> dict[tuple[int, int, int], Group]:
        """The best group starting at operator i for every end j and way of meeting its neighbours
        (carrying tensors in, out), whole or in slabs."""
        n = len(self.ops)
        found: dict[tuple[int, int, int], Group] = {}

        def keep(j: int, grp: Group | None, carry=(0, 0)) -> None:
            key = (j, *carry)
            if grp is not None and (key not in found or self.cost(grp) < self.cost(found[key])):
                found[key] = grp

        for j in range(i + 1, min(n, i + self.max_group) + 1):  # whole
            whole_units = self._units(i, j, None)  # once for every way of meeting the neighbours
            grp = self.evaluate(i, j, None, 1, units=whole_units)
            if grp is None:
                break
            if j > i + 1:
                keep(j, grp)
            for carry in self._carries(i, j)[1:]:
                keep(j, self.evaluate(i, j, None, 1, carry_in=carry[0], carry_out=carry[1], units=whole_units), carry)
        for outer, inner, extent, outer_extent in self._seeds(i):
            spec = [(outer, inner)]
            inner_state = {t: pos for t, pos in self.sigs[i][inner].items() if pos is not None}
            # the outer level also records what it leaves whole (None): x read whole by q's column
            # chunks must not be cut by the batch in k's, which reads it too
            outer_state = dict(self.sigs[i][outer]) if outer else {}
            produced = written(self.ops[i])
            loop_made = set(produced)  # what the current inner loop made (:mod:`loopwise.memory.segments`)
            loops = 1
            for j in range(i + 1, min(n, i + self.max_group) + 1):
                if j > i + 1:
                    k = j - 1
                    outer_k = self._consistent(outer_state, k, outer_extent, produced) if outer else [None]
                    pair = self._pair(outer_k, self._consistent(inner_state, k, extent, loop_made))
                    if pair is None and outer is not None:  # a new inner loop, once every slab of this one has run
                        # (with no outer level, a tensor held whole from one loop to the next is
                        # what carrying it across a group boundary does already)
                        loops += 1
                        pair = self._pair(outer_k, fresh_dims(self, k, extent)) if loops <= MAX_LOOPS else None
                        inner_state, loop_made = {}, set()
                    if pair is None:
                        break
                    spec.append(pair)
                    for state, dim, whole in ((inner_state, pair[1], False), (outer_state, pair[0], True)):
                        if dim is not None:
                            for t, pos in self.sigs[k][dim].items():
                                if pos is not None or whole:
                                    state.setdefault(t, pos)
                    produced |= written(self.ops[k])
                    loop_made |= written(self.ops[k])
                units = self._units(i, j, spec)
                if units is None:
                    break
                if not slab_group(self, i, j, spec, extent, outer_extent, units, found, keep):
                    break
        if i in self.chains:  # after the groups above, so that they win a tie
            keep(self.chains[i], key_blocked(self, i, self.chains[i]))
        kept = kept_tiled(self, i)
        if kept is not None:
            keep(i + 1, kept[1], (0, kept[0]))
        fused = self.epilogue(i)
        if fused is not None:
            keep(i + 2, fused)
        return found

    def epilogue(self, i: int) -> Group | None:
        """Operator i, tiled, with operator i + 1 applied to each output tile as its epilogue
        (:mod:`loopwise.memory.epilogue`), or None where it is none."""
        if i not in self.epilogues:
            found = epilogue_group(self, i)
            self.epilogues[i] = found
        found = self.epilogues[i]
        return None if found is None else found[0]

    @staticmethod
    def _pair(outer_k: list, inner_k: list) -> tuple[str | None, str] | None:
        """The first (outer, inner) pair of distinct dimensions, in order of preference."""
        return next(((o, d) for o in outer_k for d in inner_k if o != d), None)

    def _hopeless(self, i: int, j: int, units, extent: int, outer_extent: int) -> bool:
        """True when even the smallest slabs with every invariant streamed do not fit (then no
        longer group of this chain fits either)."""
        length = j - i
        cover = [0.0] * (length + 1)  # Python floats: the same sums as float64, without indexing an array
        for u in units.values():
            size = u.whole / (extent if u.sliced else 1) / (outer_extent if u.outer else 1)
            a, z = (u.hold_first, u.hold_last) if u.spans else (u.first, u.last)
            cover[a - i] += size
            cover[z - i + 1] -= size
        return bool(np.cumsum(cover)[:length].max() > self.cap)

    def run(self, progress=None, searched: dict[int, dict] | None = None, on_searched=None) -> Plan:
        """The plan; ``searched``: operators searched before (:mod:`loopwise.memory.planner_state`),
        not searched again; ``on_searched(i, state)`` is called as each other operator is searched."""
        from loopwise.memory.planner_state import RecordedGroup, operator_state, restore_operator

        n = len(self.ops)
        # best[j][c]: the least traffic of operators 0..j-1, with the tensors of carried set c of
        # boundary j (grouping.carry_sets; 0: none) kept on chip for the next group; final once
        # every group ending at j is known, i.e. before the groups starting at j are searched
        inf = (self.inf, [])
        best: list[list[tuple[float, list[Group]]]] = [[(self.zero, [])] + [inf] * (len(self.carry_sets[0]) - 1)] + [
            [inf] * len(self.carry_sets[b]) for b in range(1, n + 1)]
        by_end: dict[int, list[tuple[int, int, int, Group]]] = {}
        self.reached = {}  # (j, carried set out): the least traffic to j through a group found so far
        for i in range(n):
            if i > 0:
                close(self, i, best, by_end)
            self.start = tuple(way[0] for way in best[i])
            if searched and i in searched:
                found = restore_operator(self, i, searched[i])
            else:
                found = self.candidates(i)
                self.single(i)
                if on_searched is not None:
                    on_searched(i, operator_state(self, i, found))
            for (j, cin, cout), grp in found.items():
                by_end.setdefault(j, []).append((i, cin, cout, grp))
                if self.objective != "traffic":
                    continue
                here = self.start[cin] + grp.traffic_bytes
                self.reached[(j, cout)] = min(self.reached.get((j, cout), float("inf")), here)
            if progress is not None:
                progress(i + 1, n)
        close(self, n, best, by_end)
        total, groups = best[n][0]
        groups = [grp.rebuild(self) if isinstance(grp, RecordedGroup) else grp for grp in groups]
        total = total if self.objective == "traffic" else sum(grp.traffic_bytes for grp in groups)
        per_op = tuple(self.single(i).traffic_bytes for i in range(n))
        removed = sum(len(g.resident) for g in groups)
        return Plan(tuple(groups), int(total), self.g.compulsory_bytes(), sum(per_op), removed, self.evaluated, per_op,
                    schedule=build_schedule(self, groups), touched=self._touched())

    def baseline(self) -> Plan:
        """Every operator alone with its best tiling, as a plan with its schedule."""
        singles = [self.single(i) for i in range(len(self.ops))]
        per_op = tuple(s.traffic_bytes for s in singles)
        return Plan(tuple(singles), sum(per_op), self.g.compulsory_bytes(), sum(per_op), 0, self.evaluated, per_op,
                    schedule=build_schedule(self, singles), touched=self._touched())

    def _touched(self) -> tuple[int, ...]:
        return tuple(sum(b for b, _, _ in fact.values()) for fact in self.facts)
