"""What a candidate group moves and holds, tensor by tensor, before its slab size is chosen: the
traffic made once, the traffic made again by every outer slab, the bytes held at each operator by
how they are sliced, its invariants and the intermediates that stay on chip.

A group is weighed several times, once for each way it can meet its neighbours (tensors carried in
from the group before, or out to the group after). Only the carried tensors count differently, so
the tally without carries is made once and a way with carries changes the carried tensors alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from loopwise.memory.handed import handed_pair
from loopwise.memory.segments import bounds, segments
from loopwise.memory.slabs import Invariants, Unit

KINDS = ("whole", "both", "inner", "span")  # span: held at the outer slab's size (several inner loops)


@dataclass
class Tally:
    """A group's traffic and occupancy before its slab size is chosen."""

    moved: int  # made once (stores, and loads of tensors sliced by every slab level)
    outer_moved: int  # made again by every outer slab (sliced by the inner slab dimension only)
    charged: np.ndarray  # ``moved`` by the operator that makes it
    outer_charged: np.ndarray
    held: dict[str, np.ndarray]  # bytes held at each operator, by slicing (whole bytes: exact in floats)
    invariants: list  # (bytes, bytes loaded, first, last, name, sliced by the outer dimension, in several loops)
    resident: list[str]  # made and used up inside the group
    own: dict[str, tuple] = field(default_factory=dict)  # each tensor's part, to take out again
    table: Invariants | None = None  # ``invariants`` as columns, made when first asked for
    shares: Tally | None = None  # the tally with the same invariants, whose table this one uses
    loaded: int | None = None  # ``loaded_once``, when known
    handed: tuple = ()  # carried tensors held part by part (:mod:`loopwise.memory.handed`)

    @property
    def loaded_once(self) -> int:
        """Bytes the invariants load when each is loaded once (the table is not made for it)."""
        if self.loaded is None:
            self.loaded = self.table.total_loaded if self.table is not None else sum(v[1] for v in self.invariants)
        return self.loaded

    def invariant_table(self) -> Invariants:
        if self.table is None:
            self.table = self.shares.invariant_table() if self.shares is not None else Invariants(self.invariants)
        return self.table


def units(planner, i: int, j: int, spec) -> dict | None:
    """The group's tensors (as :class:`loopwise.memory.slabs.Unit`) for operators i..j-1 under the
    slab choice ``spec`` (per operator: outer dimension or None, inner dimension); None when an
    intermediate would be sliced one way by its producer and another by a consumer of the same
    inner loop, or when one used in several inner loops is not sliced by the outer dimension
    wherever it is used (:mod:`loopwise.memory.segments`). The result is shared: not to be changed."""
    segs = segments(planner, i, spec) if spec is not None else (0,) * (j - i)
    out = _chain(planner, i, j, spec, segs)
    if out is None or len(set(segs)) == 1:
        return out
    loops = bounds(segs, i)
    out = dict(out)
    for t, u in out.items():
        if u.spans:
            if u.produced and not u.outer:
                return None
            out[t] = replace(u, sliced=False, hold_first=loops[segs[u.first - i]][0],
                             hold_last=loops[segs[u.last - i]][1])
    return out


def _chain(planner, i: int, j: int, spec, segs) -> dict | None:
    """Each tensor's :class:`Unit` over operators i..j-1 before the loops are joined up. The search
    grows a group one operator at a time, so the last chain is extended when ``spec`` continues it
    (its units are copied where they change, never changed in place)."""
    key = (i, j, None if spec is None else tuple(spec))
    last = getattr(planner, "_unit_chain", None)
    if last is not None and last[0][:2] == (i, j - 1) and (
            (spec is None and last[0][2] is None) or (spec is not None and last[0][2] == key[2][:-1])):
        out, start = dict(last[1]), j - 1
    else:
        out, start = {}, i
    for k in range(start, j):
        if not _extend(planner, out, k, i, spec, segs[k - i]):
            return None
    planner._unit_chain = (key, out)
    return out


def _extend(planner, out: dict, k: int, i: int, spec, seg: int) -> bool:
    """``out`` with operator k's tensors added (a new :class:`Unit` for each one it changes);
    False when an intermediate is sliced otherwise than before in its loop."""
    if spec is None:
        sig_o = sig_i = None
    else:
        outer, inner = spec[k - i]
        sig_o = planner.sigs[k][outer] if outer is not None else None
        sig_i = planner.sigs[k][inner]
    for t, (nbytes, _, w) in planner.facts[k].items():
        so = spec is not None and (sig_o is None or sig_o[t] is not None)  # no outer level: as sliced
        si = spec is not None and sig_i[t] is not None
        u = out.get(t)
        if u is None:
            out[t] = Unit(k, k, nbytes, si, w, so, seg)
            continue
        if u.produced and (u.outer != so or (u.seg == seg and not u.spans and u.sliced != si)):
            return False  # an intermediate read whole by a later operator of its loop: no slabs
        whole = max(u.whole, nbytes)
        if not u.produced and not w:
            # read again from outside: held as what its readers touch together (the parts of
            # a fused projection that two operators read are all on chip)
            whole = max(whole, planner._loaded(t, u.first, k))
        out[t] = Unit(u.first, k, whole, u.sliced and si, u.produced or w, u.outer and so, seg,
                      u.spans or u.seg != seg)
    return True


def tally(planner, i: int, j: int, spec, units) -> Tally:
    """Operators i..j-1 with ``units`` (:meth:`_Planner._units`), no tensor carried. The search
    grows a group one operator at a time: the running tally of the group one shorter over the same
    slab choice is brought up to date where tensors changed, those of operator j - 1 and those held
    through several inner loops (their loops grew); the rest are held as before, as :func:`units`
    gives them the same, and stored or not as before (operator j - 1 does not use them). Any other
    group is tallied from scratch."""
    key = (i, j, None if spec is None else tuple(spec))
    last = getattr(planner, "_tally_chain", None)
    if last is not None and last[0][:2] == (i, j - 1) and (
            (spec is None and last[0][2] is None) or (spec is not None and last[0][2] == key[2][:-1])):
        running = last[1]
        running.grow()
        changed = [t for t in (*planner.facts[j - 1], *running.spans) if t in units]
    else:
        running, changed = _Running(j - i), units
    for t in changed:
        running.put(planner, t, units[t], i, j, spec)
    if len(running.parts) != len(units):  # not the tensors of the shorter group and operator j - 1: start again
        running = _Running(j - i)
        for t, u in units.items():
            running.put(planner, t, u, i, j, spec)
    planner._tally_chain = (key, running)
    return running.tally(units)


class _Running:
    """A group's tally as Python integers, each tensor's part kept so that it can be taken out
    when the tensor changes (one part: its unit, whether it is stored, what it adds where)."""

    def __init__(self, length: int) -> None:
        self.moved = self.outer_moved = self.loaded = 0
        self.charged, self.outer_charged = [0] * length, [0] * length
        self.covers = {k: [0] * (length + 1) for k in KINDS}
        self.parts: dict[str, tuple] = {}
        self.own: dict[str, tuple] = {}
        self.invariants: dict[str, tuple] = {}
        self.resident: set[str] = set()
        self.spans: set[str] = set()

    def grow(self) -> None:
        """One operator more."""
        self.charged.append(0)
        self.outer_charged.append(0)
        for c in self.covers.values():
            c.append(0)

    def put(self, planner, t: str, u: Unit, i: int, j: int, spec) -> None:
        """Tensor ``t`` held as ``u`` in group i..j-1 (its old part replaced where it changed)."""
        stored = u.produced and (t in planner.outputs or planner.uses[t][-1] >= j)
        old = self.parts.get(t)
        if old is not None:
            if old[0] is u and old[1] == stored:
                return
            self._add(old[2], -1)
        part = _part(planner, t, u, i, spec, stored)
        self._add(part, 1)
        self.parts[t] = (u, stored, part)
        self.own[t] = part[0]
        if part[3] is not None:
            self.invariants[t] = part[3]
        else:
            self.invariants.pop(t, None)
        (self.resident.add if part[0][0] == "resident" else self.resident.discard)(t)
        (self.spans.add if u.spans else self.spans.discard)(t)

    def _add(self, part: tuple, sign: int) -> None:
        own, charge, cover, _ = part
        role, amount, kind = own
        if role == "invariant":
            self.loaded += sign * amount
        elif role == "moved":
            self.moved += sign * amount
            self.charged[charge] += sign * amount
        elif role == "outer":
            self.outer_moved += sign * amount
            self.outer_charged[charge] += sign * amount
        if cover is not None:
            a, z, whole = cover
            self.covers[kind][a] += sign * whole
            self.covers[kind][z + 1] -= sign * whole

    def tally(self, units) -> Tally:
        """The tally as it stands (arrays and lists of its own; invariants in the order of ``units``)."""
        inv, resident = self.invariants, self.resident
        held = np.cumsum(np.array(list(self.covers.values()), dtype=float), axis=1)[:, :len(self.charged)]
        return Tally(self.moved, self.outer_moved, np.array(self.charged, dtype=float),
                     np.array(self.outer_charged, dtype=float), dict(zip(self.covers, held)),
                     [inv[t] for t in units if t in inv] if inv else [],
                     [t for t in units if t in resident] if resident else [], dict(self.own), loaded=self.loaded)


def _part(planner, t: str, u: Unit, i: int, spec, stored: bool) -> tuple:
    """What tensor ``t`` adds to the tally of a group starting at operator i: ``(role, amount,
    kind)`` (its :attr:`Tally.own`), the operator its traffic is charged to, the bytes it holds
    from one operator to another (or None), and its invariant entry (or None)."""
    kind = _kind(spec, u)
    if u.produced:
        if stored:
            stored_bytes = planner.facts[u.first][t][0]  # as its producer wrote it
            return ("moved", stored_bytes, kind), u.first - i, _cover(u, i), None
        return ("resident", 0, kind), None, _cover(u, i), None
    key = (t, u.first, u.last)
    loaded = planner.loads[key] if key in planner.loads else planner._loaded(t, u.first, u.last)
    loaded = u.whole if loaded is None else loaded
    if kind is None:
        a, z = u.held
        return ("invariant", loaded, None), None, None, (u.whole, loaded, a - i, z - i, t, u.outer, u.spans)
    return ("outer" if kind == "inner" else "moved", loaded, kind), u.first - i, _cover(u, i), None


def _cover(u: Unit, i: int) -> tuple[int, int, int]:
    a, z = (u.hold_first, u.hold_last) if u.spans else (u.first, u.last)
    return a - i, z - i, u.whole


def _kind(spec, u: Unit) -> str | None:
    """How a tensor is held in a group: whole, sliced by both slab levels, by the inner one, at
    the outer slab's size (used in several inner loops), or None (an invariant of the slabs)."""
    if spec is None:
        return "whole"
    if u.spans:
        return "span" if u.outer else None
    return "both" if (u.sliced and u.outer) else "inner" if u.sliced else None


def with_carries(planner, base: Tally, i: int, j: int, spec, units, carried_in: set, carried_out: set) -> Tally:
    """``base`` with the tensors of ``carried_in`` and ``carried_out`` kept on chip: not loaded,
    not stored (unless a model output), held whole (in slabs, through the whole loop), or in
    slabs part by part where one carried out is written over one carried in
    (:mod:`loopwise.memory.handed`)."""
    length = j - i
    pair = handed_pair(planner, i, spec, units, carried_in, carried_out)
    out = Tally(base.moved, base.outer_moved, base.charged.copy(), base.outer_charged.copy(),
                {k: h.copy() for k, h in base.held.items()}, base.invariants, list(base.resident))
    dropped = set()
    for t in sorted(carried_in | carried_out):
        u = units.get(t)
        if u is None:
            continue
        role, amount, kind = base.own[t]
        if role == "invariant":
            dropped.add(t)
        elif role == "resident":
            out.resident.remove(t)
        elif role == "outer":
            out.outer_moved -= amount
            out.outer_charged[u.first - i] -= amount
        else:
            out.moved -= amount
            out.charged[u.first - i] -= amount
        if kind is not None:
            a, z = u.held
            out.held[kind][a - i:z - i + 1] -= u.whole
        parts = pair.get(t)
        first, last = (0, u.last - i) if t in carried_in else (u.first - i, length - 1)
        if parts is not None:
            out.handed += (parts,)
        elif spec is not None:
            # in slabs it is on chip through the whole loop: later slabs still read what is
            # carried in, and the parts earlier slabs made of what is carried out stay
            first, last = 0, length - 1
        # held as its producer made it, even where this group reads only part of it
        handed = max(u.whole, planner.facts[planner.producer[t]][t][0])
        if parts is None:
            out.held["whole"][first:last + 1] += handed
        if t in carried_out and t in planner.outputs:
            stored = planner.facts[u.first][t][0]  # a model output is stored all the same
            out.moved += stored
            out.charged[u.first - i] += stored
        elif t in carried_out:
            out.resident.append(t)
    if dropped:
        out.invariants = [v for v in base.invariants if v[4] not in dropped]
    else:
        out.shares, out.loaded = base, base.loaded  # the same invariants: what each slab size makes of them too
    return out
