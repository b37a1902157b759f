"""An attention's softmax chain run key block by key block (flash-style), as one group of the plan.

A recognised chain (:mod:`loopwise.memory.softmax_chains`: scores, [scale], [mask], softmax, value
product) runs in nested loops: none, one or two outer loops over leading dimensions of its scores
(labels ``outer`` and, outside it, ``batch``: a head, a sequence), a loop over blocks of query rows
(label ``slab``), and inside it a loop over blocks of keys (label ``key``). Per query block:

- before the key loop: what the chain reads that the key dimension does not index (the queries) is
  loaded and held, the output block is allocated, and the online softmax's running row maximum and
  sum (``rowmax:<softmax>``, ``rowsum:<softmax>``, fp32: :data:`STATE_BYTES` per query row each)
  are allocated;
- in the key loop: what the key dimension indexes (the keys, the values, a mask) is loaded block by
  block at its first reader and freed after its last; the blocks of scores and probabilities are
  made and used on chip, never stored;
- after it: the output block, complete, is stored; everything is freed.

So the queries and the output move once, the keys and values once per query block (and per
iteration of an outer loop that does not cut them). A tensor's part in one iteration is its share
of every loop that cuts it (:func:`share_bound`, an upper bound of the schedule's exact shares).
The block sizes are powers of two; the group takes the least traffic that fits, ties going to the
largest blocks.

:func:`key_loops` says how each tensor is held (one :class:`Held` each); the planner's tally
(:func:`key_blocked`) and the schedule (:mod:`loopwise.memory.key_schedule`) both read it.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from loopwise.memory.plan_records import Group, Slab
from loopwise.memory.slabs import sizes_below
from loopwise.memory.softmax_chains import softmax_chains

BATCH, OUTER, SLAB, KEY = "batch", "outer", "slab", "key"
LABELS = (BATCH, OUTER, SLAB, KEY)  # the loops, outermost first (batch: a second outer loop, outside the first)
STATE_BYTES = 4  # an fp32 running maximum (and sum) per query row
BEFORE, AFTER = -1, 1 << 30  # positions of the steps before and after the key loop


@dataclass(frozen=True)
class Held:
    """How a tensor of the chain is on chip: ``nbytes`` over every iteration of the loops it is
    split over (``labels``), allocated at chain position ``first`` and freed after ``last``
    (:data:`BEFORE`: in the step before the key loop; :data:`AFTER`: in the one after it);
    ``role``: ``load`` (read from DRAM), ``made`` (made and used up on chip), ``store`` (the
    output, stored after the key loop) or ``state`` (the online softmax's running state)."""

    tensor: str
    nbytes: int
    labels: tuple[str, ...]
    role: str
    first: int
    last: int
    charged_to: int  # the chain position whose traffic its loads or store are


@dataclass(frozen=True)
class KeyLoops:
    """A chain's loops, outermost first: each a label (:data:`LABELS`), its dimension in every
    operator and its extent; and the chain's tensors as held."""

    loops: tuple[tuple[str, tuple[str, ...], int], ...]
    held: tuple[Held, ...]

    def dims(self, label: str) -> tuple[str, ...] | None:
        return next((dims for lab, dims, _ in self.loops if lab == label), None)

    def extent(self, label: str) -> int:
        return next((extent for lab, _, extent in self.loops if lab == label), 1)


def state_buffers(softmax: str) -> tuple[str, str]:
    """The buffers of the online softmax's running row maximum and sum (as the replay names them)."""
    return (f"rowmax:{softmax}", f"rowsum:{softmax}")


def chain_spans(graph) -> dict[int, int]:
    """The first operator position of every recognised chain whose operators are consecutive in
    the graph's order, to one past its last."""
    position = {op.name: k for k, op in enumerate(graph.operators)}
    out = {}
    for chain in softmax_chains(graph):
        at = [position[name] for name in chain.operators]
        if at == list(range(at[0], at[0] + len(at))):
            out[at[0]] = at[0] + len(at)
    return out


def _row_indices(ops) -> list[tuple[str, ...]] | None:
    """Per operator, the index of the chain's row tensor (the scores, then what each operator
    makes of them): its dimension names, or None when one is not a plain loop dimension."""
    out = []
    for k, op in enumerate(ops):
        access = op.writes[0] if k == 0 else next(a for a in op.reads if a.tensor == ops[k - 1].writes[0].tensor)
        if any(d not in op.dims for d in access.index):
            return None
        out.append(tuple(access.index))
    return out


def outer_positions(ops) -> list[tuple[int, ...]]:
    """The outer loops a chain may take: none, one or two leading positions of its scores' index
    (outermost first)."""
    rows = _row_indices(ops)
    if rows is None:
        return []
    leading = [p for p in range(len(rows[0]) - 2) if all(op.dims[r[p]] > 1 for op, r in zip(ops, rows))]
    return [()] + [(p,) for p in leading] + [(p, q) for p in leading for q in leading if p < q]


def key_loops(planner, i: int, j: int, positions: tuple[int, ...]) -> KeyLoops | None:
    """Chain i..j-1 with outer loops at ``positions`` of its scores' index, or None when a tensor
    cannot be held that way (an intermediate not cut by every loop, an output cut by the keys, a
    loop dimension that cannot carry slabs)."""
    ops = planner.ops[i:j]
    rows = _row_indices(ops)
    if rows is None:
        return None
    labels = LABELS[len(LABELS) - 2 - len(positions):]
    at = list(positions) + [-2, -1]
    loops = tuple((label, tuple(r[p] for r in rows), ops[0].dims[rows[0][p]]) for label, p in zip(labels, at))
    for k, op in enumerate(ops):
        if any(dims[k] not in planner.sigs[i + k] for label, dims, _ in loops if label != KEY):
            return None
        key = loops[-1][1][k]
        if any(re.search(rf"\b{re.escape(key)}\b", a.guard) for a in op.reads + op.writes):
            return None
    held = _held(planner, i, j, loops)
    return None if held is None else KeyLoops(loops, held)


def _softmax_at(ops) -> int:
    return next(k for k, op in enumerate(ops) if op.coupled)


def _labels(planner, i: int, k: int, t: str, loops) -> set[str]:
    """The loops that cut ``t`` at chain operator k: by the slab signatures (the loops outside the
    key loop) and, for the keys, a plain index in one position of every access."""
    sigs = planner.sigs[i + k]
    out = {label for label, dims, _ in loops if label != KEY and sigs[dims[k]][t] is not None}
    key = loops[-1][1][k]
    if all(sum(1 for e in a.index if re.search(rf"\b{re.escape(key)}\b", e)) == 1
           and key in [e.strip("() ") for e in a.index] for a in planner.ops[i + k].accesses(t)):
        out.add(KEY)
    return out


def _held(planner, i: int, j: int, loops) -> tuple[Held, ...] | None:
    """Each tensor of chain i..j-1 as held (:class:`Held`); None when one cannot be."""
    users: dict[str, list[int]] = {}
    for k in range(j - i):
        for t in planner.facts[i + k]:
            users.setdefault(t, []).append(k)
    full = tuple(label for label, _, _ in loops)
    out = []
    last_op = j - i - 1
    for t, at in users.items():
        common = set.intersection(*(_labels(planner, i, k, t, loops) for k in at))
        cut = tuple(x for x in full if x in common)
        made = [k for k in at if planner.facts[i + k][t][2]]
        if not made:
            nbytes = planner._loaded(t, i + at[0], i + at[-1])
            first, last = (at[0], at[-1]) if KEY in cut else (BEFORE, AFTER)
            out.append(Held(t, nbytes, cut, "load", first, last, at[0]))
            continue
        nbytes = max(planner.facts[i + k][t][0] for k in at)
        if made == [last_op] and at == [last_op]:  # the output: cut by the query loops, summed over keys
            needed = t in planner.outputs or planner.uses[t][-1] >= j
            if cut != full[:-1] or not needed:
                return None
            out.append(Held(t, nbytes, cut, "store", BEFORE, AFTER, last_op))
            continue
        if made != [at[0]] or cut != full or t in planner.outputs or planner.uses[t][-1] >= j:
            return None
        out.append(Held(t, nbytes, cut, "made", at[0], at[-1], at[0]))
    soft = planner.ops[i + _softmax_at(planner.ops[i:j])]
    rows = math.prod(e for d, e in soft.dims.items() if d not in soft.coupled)
    out += [Held(name, STATE_BYTES * rows, full[:-1], "state", BEFORE, AFTER, 0) for name in state_buffers(soft.name)]
    return tuple(out)


def share_bound(nbytes: int, labels, sizes: dict[str, tuple[int, int]]) -> int:
    """The most bytes of an entry split over ``labels`` that one iteration holds (``sizes``: each
    loop's (size, extent)): at most its share rounded up, loop by loop."""
    for label in labels:
        size, extent = sizes[label]
        nbytes = -(-nbytes * size // extent)
    return nbytes


def _trips(sizes: dict[str, tuple[int, int]], label: str) -> int:
    size, extent = sizes[label]
    return -(-extent // size)


def weigh(loops: KeyLoops, sizes: dict[str, tuple[int, int]], length: int):
    """(traffic, traffic per chain operator, bytes held at each chain operator) with these block
    sizes: a load or store moves its bytes once per iteration of every enclosing loop that does
    not cut it (the key loop encloses only what is allocated in it)."""
    per_op = [0] * length
    held = [0] * length
    for h in loops.held:
        enclosing = [x for x in sizes if x != KEY or h.first != BEFORE]
        if h.role in ("load", "store"):
            per_op[h.charged_to] += h.nbytes * math.prod(_trips(sizes, x) for x in enclosing if x not in h.labels)
        part = share_bound(h.nbytes, h.labels, sizes)
        first, last = (0, length - 1) if h.first == BEFORE else (h.first, h.last)
        for k in range(first, last + 1):
            held[k] += part
    return sum(per_op), per_op, held


def key_blocked(planner, i: int, j: int) -> Group | None:
    """Chain i..j-1 run in key blocks with the least traffic that fits the scratchpad, over its
    outer loops and block sizes; None when none fits."""
    best = None
    for positions in outer_positions(planner.ops[i:j]):
        loops = key_loops(planner, i, j, positions)
        if loops is None:
            continue
        for found in _sized(planner.cap, loops, j - i):
            rank = (found[0], -found[3])
            if best is None or rank < best[0]:
                best = (rank, loops, found)
    if best is None:
        return None
    _, loops, (traffic, per_op, held, _, sizes) = best
    return _group(planner, i, j, loops, sizes, traffic, per_op, held)


def _sized(capacity: int, loops: KeyLoops, length: int):
    """(traffic, per operator, held, block volume, sizes) for every size of the outer loops and
    of the key blocks, with the largest query block that fits."""
    outside = [(label, extent) for label, _, extent in loops.loops[:-2]]
    query_extent, key_extent = loops.extent(SLAB), loops.extent(KEY)
    for outer_sizes in itertools.product(*(sizes_below(extent) for _, extent in outside)):
        for key_size in sizes_below(key_extent):
            fitting = None
            for query_size in sizes_below(query_extent) + [query_extent]:
                sizes = {label: (size, extent) for (label, extent), size in zip(outside, outer_sizes)}
                sizes.update({SLAB: (query_size, query_extent), KEY: (key_size, key_extent)})
                traffic, per_op, held = weigh(loops, sizes, length)
                if max(held) > capacity:
                    break
                fitting = (traffic, per_op, held, math.prod(outer_sizes) * query_size * key_size, sizes)
            if fitting is not None:
                yield fitting


def slab_sizes(slab: Slab) -> dict[str, tuple[int, int]]:
    """Each loop's (size, extent) of a group run in key blocks, by label, outermost first."""
    sizes = {}
    if slab.batch_dims:
        sizes[BATCH] = (slab.batch_size, slab.batch_extent)
    if slab.outer_dims:
        sizes[OUTER] = (slab.outer_size, slab.outer_extent)
    return {**sizes, SLAB: (slab.size, slab.extent), KEY: (slab.key_size, slab.key_extent)}


def _group(planner, i, j, loops: KeyLoops, sizes, traffic, per_op, held) -> Group:
    names = planner.names[i:j]
    made = tuple(sorted(h.tensor for h in loops.held if h.role == "made"))
    streamed = tuple(sorted(h.tensor for h in loops.held if h.role == "load" and KEY in h.labels))
    outer_size, outer_extent = sizes.get(OUTER, (1, 1))
    batch_size, batch_extent = sizes.get(BATCH, (1, 1))
    slab = Slab(loops.dims(SLAB), loops.extent(SLAB), sizes[SLAB][0], (), streamed, loops.dims(OUTER), outer_extent,
                outer_size, key_dims=loops.dims(KEY), key_extent=loops.extent(KEY), key_size=sizes[KEY][0],
                batch_dims=loops.dims(BATCH), batch_extent=batch_extent, batch_size=batch_size)
    return Group(names, int(traffic), int(max(held)), made, slab=slab, occupancy=tuple(int(h) for h in held),
                 per_operator=tuple(int(x) for x in per_op))
