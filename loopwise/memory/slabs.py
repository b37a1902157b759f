"""Slabs: which loop dimensions of an operator can carry slabs (a chain of operators run slab by
slab), the slab sizes tried, and a group's best slab size with its resident invariants."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from loopwise.memory.handed import handed_cover, outer_sizes, sizes_below
from loopwise.memory.ir import Operator
from loopwise.memory.plan_records import Group, Slab


def slab_signatures(op: Operator) -> dict[str, dict[str, int | None]]:
    """The loop dimensions of ``op`` that can carry slabs: for each, every tensor's sliced dimension
    (``None``: invariant, the dimension does not index it). A dimension is left out when it is
    coupled, when it indexes a tensor in any way but in one position, alone or as the start of a
    block (:func:`block_of`), or when a tensor the operator writes does not depend on it (a
    reduction)."""
    out: dict[str, dict[str, int | None]] = {}
    written = {a.tensor for a in op.writes}
    units = {d for d, e in op.dims.items() if e == 1}  # always 0: a term "8*g" with one group is no term
    for d in op.dims:
        if d in op.coupled:
            continue
        word = re.compile(rf"\b{re.escape(d)}\b")
        sig: dict[str, int | None] = {}
        ok = True
        for t in op.tensors:
            positions, blind = set(), False
            for access in op.accesses(t.name):
                if word.search(access.guard):
                    ok = False  # read only where a guard on this dimension holds: slabs would not be even
                found = False
                for j, expr in enumerate(access.index):
                    if word.search(expr):
                        if _plain(expr, units) != d and not block_of(expr, d, units, op.dims, t.shape[j], access.guard):
                            ok = False
                        positions.add(j)
                        found = True
                blind = blind or not found
            if len(positions) > 1 or ((not positions or blind) and t.name in written):
                ok = False
            if not ok:
                break
            # read at d by one access and whole by another (query rows at i, key rows at every j):
            # every slab needs all of it read whole, so it is an invariant of the slabs
            sig[t.name] = positions.pop() if positions and not blind else None
        if ok:
            out[d] = sig
    return out


_BRACKETED = re.compile(r"\(\s*([A-Za-z_]\w*|\d+)\s*\)")  # one name or number in brackets
_ADDED_SUM = re.compile(r"(^|\+)\s*\(([^()]*)\)")  # a bracketed sum added as it is: "+ (64 + d3)"
_NOT_AFFINE_SUM = re.compile(r"\bmod\b|\bfloor\b|\bceil\b|/")
_TERM = re.compile(r"^(?:(\d+)\*)?([A-Za-z_]\w*)$|^(\d+)$")


def _linear(expr: str, units: set[str]) -> tuple[dict[str, int], int] | None:
    """``expr`` as (coefficient per loop dimension, constant), terms in loop dimensions of extent 1
    dropped; None when it is not a plain sum of terms (floor, mod, a product of a sum)."""
    if _NOT_AFFINE_SUM.search(expr):
        return None
    text = _BRACKETED.sub(r"\1", expr.replace(" ", ""))  # "128*(l1)+(n)" as an importer writes it
    while True:
        shed = _ADDED_SUM.sub(r"\1\2", text)  # brackets around a sum that is only added change nothing
        if shed == text:
            break
        text = shed
    text = text.replace("-", "+-")
    coefficients: dict[str, int] = {}
    constant = 0
    for term in filter(None, text.split("+")):
        sign = -1 if term.startswith("-") else 1
        match = _TERM.match(term.lstrip("-"))
        if match is None:
            return None
        if match.group(3) is not None:
            constant += sign * int(match.group(3))
        elif match.group(2) not in units:
            coefficients[match.group(2)] = coefficients.get(match.group(2), 0) + sign * int(match.group(1) or 1)
    return {k: v for k, v in coefficients.items() if v}, constant


def _plain(expr: str, units: set[str]) -> str:
    """``expr`` reduced to one loop dimension when it is that dimension alone, once terms in loop
    dimensions of extent 1 and zero constants are dropped (``1*p + 1*r - 0`` is ``p`` when r is 0;
    ``8*g + k`` is ``k`` with one group); anything else comes back as it is."""
    parsed = _linear(expr, units)
    if parsed is None:
        return expr
    coefficients, constant = parsed
    if constant == 0 and len(coefficients) == 1 and next(iter(coefficients.values())) == 1:
        return next(iter(coefficients))
    return expr


def guard_range(guard: str, dim: str, extent: int) -> tuple[int, int]:
    """The values ``[lo, hi)`` of loop dimension ``dim`` (``0 <= dim < extent``) where ``guard``
    holds, from its bounds on ``dim`` alone (``64 <= d3 < 128``, ``d3 >= 64``); other constraints
    of the guard are not read, so the range may be wider than the guard's, never narrower."""
    lo, hi = 0, extent
    for clause in re.split(r"\band\b", guard):
        tokens = re.findall(r"-?\d+|[A-Za-z_]\w*|<=|>=|<|>", clause)
        for left, op, right in zip(tokens[::2], tokens[1::2], tokens[2::2]):
            if op in (">", ">="):  # "d >= 64" as "64 <= d"
                left, right, op = right, left, op.replace(">", "<")
            if op not in ("<", "<="):
                continue
            if right == dim and re.fullmatch(r"-?\d+", left):
                lo = max(lo, int(left) + (op == "<"))
            elif left == dim and re.fullmatch(r"-?\d+", right):
                hi = min(hi, int(right) + (op == "<="))
    return lo, hi


def block_of(expr: str, dim: str, units: set[str], dims: dict[str, int], size: int, guard: str = "") -> int | None:
    """The stride ``c`` when ``expr`` is ``a + c*dim + e`` (a constant ``a``) with ``e`` another loop
    dimension whose values ``[lo, hi)`` (where ``guard`` holds) span at most ``c``, with ``a + lo``
    at least 0, inside a tensor dimension of ``size``: each value of ``dim`` reaches a block of its
    own, all blocks alike (a head's columns of a projection, ``128*h + n``; the keys' part of a
    fused projection, ``768 + 64*h + k``; the second half of a head, ``128*h + (d - 64)`` where
    ``64 <= d``), so slabs over ``dim`` cut what the access reaches in equal disjoint parts, as a
    plain index does. None otherwise."""
    parsed = _linear(expr, units)
    if parsed is None:
        return None
    coefficients, constant = parsed
    stride = coefficients.get(dim, 0)
    rest = [d for d in coefficients if d != dim]
    if stride < 2 or len(rest) != 1 or coefficients[rest[0]] != 1:
        return None
    lo, hi = guard_range(guard, rest[0], dims[rest[0]])
    if constant + lo < 0 or hi - lo > stride or constant + stride * (dims[dim] - 1) + hi > size:
        return None
    return stride


@dataclass
class Unit:
    """A tensor as a group holds it: alive from ``first`` to ``last`` (operator positions)."""

    first: int
    last: int
    whole: int  # bytes held when the group runs whole (the largest footprint among its users)
    sliced: bool  # by the inner slab dimension, at every operator of the group that touches it
    produced: bool
    outer: bool = True  # by the outer slab dimension (True when there is none)
    seg: int = 0  # the inner loop that touched it last (:mod:`loopwise.memory.segments`)
    spans: bool = False  # touched in more than one inner loop: held at the outer slab's size
    hold_first: int = -1  # where a spanning tensor is held: its loops' first and last operators
    hold_last: int = -1

    @property
    def held(self) -> tuple[int, int]:
        """The operators it is held at (a spanning tensor: through its loops, whole)."""
        return (self.hold_first, self.hold_last) if self.spans else (self.first, self.last)


class Invariants:
    """A group's invariants, each ``(bytes held, bytes loaded, first and last operator, name, sliced
    by the outer dimension, used in several inner loops)``, as columns in the order given;
    ``moves``: what each moves when streamed, by row: per inner slab, per inner slab of every outer
    slab, per outer slab. Made once for a group and shared by its ways of meeting its neighbours
    that keep the same invariants, with what each outer slab size makes of them (:meth:`level`)."""

    def __init__(self, invariants) -> None:
        self.total_loaded = sum(v[1] for v in invariants)
        self.levels: dict[tuple[float, int], tuple] = {}
        self.floor_parts: dict = {}  # what :mod:`loopwise.memory.slab_floor` makes of the table
        cols = list(zip(*invariants)) or [()] * 7
        self.whole = np.array(cols[0], dtype=float)
        self.loaded = np.array(cols[1], dtype=float)
        self.first = np.array(cols[2], dtype=np.intp)
        self.last = np.array(cols[3], dtype=np.intp)
        self.names = cols[4]
        self.by_outer = np.array(cols[5], dtype=bool)
        self.spans = np.array(cols[6], dtype=bool)
        inner = self.by_outer & ~self.spans
        self.moves = self.loaded * np.stack([inner, ~inner & ~self.spans, self.spans])

    def level(self, fo: float, length: int) -> tuple:
        """:func:`_level`, once for each outer slab share."""
        key = (fo, length)
        if key not in self.levels:
            self.levels[key] = _level(self, fo, length)
        return self.levels[key]


def _level(inv: Invariants, fo: float, length: int) -> tuple:
    """For one outer slab size (``fo``: its share of the outer extent), the invariants largest
    first (an invariant of the inner slabs held at its size for one outer slab) and, for every
    count ``p`` of them made resident: ``cover[p]``, the bytes the p largest hold at each operator
    if streamed; ``kept[p]``, what the p largest hold resident; ``resident[p]``, what they load;
    ``streamed[:, p]``, what the rest move per inner slab, per inner slab of every outer slab and
    per outer slab."""
    held = np.where(inv.by_outer, inv.whole * fo, inv.whole)
    order = np.argsort(-held, kind="stable")
    sizes_held = held[order]
    ops = np.arange(length)
    rows = ((ops >= inv.first[order][:, None]) & (ops <= inv.last[order][:, None])) * sizes_held[:, None]
    cover = np.vstack([np.zeros(length), np.cumsum(rows, axis=0)])
    kept = np.concatenate([[0.0], np.cumsum(sizes_held)])
    resident = np.concatenate([[0.0], np.cumsum(inv.loaded[order])])
    streamed = np.zeros((3, len(order) + 1))
    streamed[:, :-1] = np.cumsum(inv.moves[:, order[::-1]], axis=1)[:, ::-1]
    return order, cover, kept, resident, streamed


def best_slab(capacity, names, moved, outer_moved, held, inv: Invariants, spec, extent, outer_extent,
              resident_t, charged, outer_charged, loops=(), handed=()) -> Group | None:
    """The group of operators ``names`` run in slabs over ``spec`` with the least traffic: for
    every slab size (and outer slab size) that fits ``capacity``, the largest invariants made
    resident first while they fit; None when no slab size fits. ``inv``: its invariants.
    ``loops``: the inner loop of each operator when there are several
    (:mod:`loopwise.memory.segments`); an invariant used in several (its last field) is loaded
    again by every outer slab when not kept, not by every inner slab. ``handed``: carried tensors
    held part by part (:func:`loopwise.memory.handed.handed_cover`)."""
    length = len(held["both"])
    sizes = sizes_below(extent)
    size_col = np.array(sizes, dtype=float)[:, None]
    best = None
    for outer_size in (outer_sizes(outer_extent) if outer_extent > 1 else [1]):
        outer_count = math.ceil(outer_extent / outer_size)
        fo = outer_size / outer_extent
        order, cover, kept, resident, streamed = inv.level(fo, length)
        # every inner slab size at once (rows): what is held at each operator
        works = (held["both"] * fo * size_col / extent + held["inner"] * size_col / extent + held["whole"]
                 + held["span"] * fo)
        if handed:
            works = works + handed_cover(handed, loops, length, extent, outer_size, outer_extent)
        works_all = works + cover[-1]  # with every invariant streamed
        if not handed and works_all[0].max() > capacity:
            break  # not even the smallest inner slab fits: a larger outer slab holds more at every operator
        for row, size in enumerate(sizes):
            # the peak for each count of resident invariants
            peaks = (works_all[row] - cover).max(axis=1) + kept
            fits = np.nonzero(peaks <= capacity)[0]
            if not len(fits):
                break  # a larger slab holds more
            p = int(fits.max())
            count = math.ceil(extent / size)
            # resident: loaded once; streamed: by every inner slab (of every outer slab, for an
            # invariant of both levels)
            per_inner, per_both, per_outer = streamed[:, p].tolist()
            traffic = moved + outer_count * (outer_moved + per_outer) + resident[p] + count * (
                per_inner + outer_count * per_both)
            # at equal traffic the larger slab wins: fewer slabs, fewer DMA descriptors
            if best is None or traffic < best[0] or (traffic == best[0] and size * outer_size > best[1] * best[2]):
                held_at = works_all[row] - cover[p] + kept[p]
                best = (traffic, size, outer_size, p, int(peaks[p]), held_at, order, count, outer_count)
    if best is None:
        return None
    traffic, size, outer_size, p, peak, held_at, order, count, outer_count = best
    occupancy = tuple(held_at.astype(np.int64).tolist())
    # each invariant's loads by the operator that first reads it: once if resident, else per
    # outer slab (several loops), per inner slab, or per inner slab of every outer slab
    times = np.where(inv.spans, outer_count, count * np.where(inv.by_outer, 1, outer_count))
    times[order[:p]] = 1
    per_op = charged + outer_count * outer_charged
    np.add.at(per_op, inv.first, inv.loaded * times)
    per_op = tuple(np.rint(per_op).astype(np.int64).tolist())  # halves to even, as round() does
    outer = tuple(o for o, _ in spec) if spec[0][0] is not None else None
    ranked = [inv.names[k] for k in order.tolist()]
    slab = Slab(tuple(d for _, d in spec), extent, size, tuple(ranked[:p]), tuple(ranked[p:]), outer, outer_extent,
                outer_size,
                tuple(loops) if len(set(loops)) > 1 else ())
    return Group(names, int(traffic), peak, resident_t, slab=slab, occupancy=occupancy, per_operator=per_op)
