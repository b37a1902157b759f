"""Slabs: which loop dimensions of an operator can carry slabs (a chain of operators run slab by
slab), the slab sizes tried, and a group's best slab size with its resident invariants."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from loopwise.memory.ir import Operator
from loopwise.memory.plan_records import Group, Slab


def slab_signatures(op: Operator) -> dict[str, dict[str, int | None]]:
    """The loop dimensions of ``op`` that can carry slabs: for each, every tensor's sliced dimension
    (``None``: invariant, the dimension does not index it). A dimension is left out when it is
    coupled, when it indexes a tensor in any way but in one position, alone or as the start of a
    block (:func:`_block_of`), or when a tensor the operator writes does not depend on it (a
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
                        if _plain(expr, units) != d and not _block_of(expr, d, units, op.dims, t.shape[j]):
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
_TERM = re.compile(r"^(?:(\d+)\*)?([A-Za-z_]\w*)$|^(\d+)$")


def _linear(expr: str, units: set[str]) -> tuple[dict[str, int], int] | None:
    """``expr`` as (coefficient per loop dimension, constant), terms in loop dimensions of extent 1
    dropped; None when it is not a plain sum of terms (floor, mod, parentheses)."""
    text = expr.replace(" ", "").replace("-", "+-")
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


def _block_of(expr: str, dim: str, units: set[str], dims: dict[str, int], size: int) -> bool:
    """True when ``expr`` is ``a + c*dim + e`` (a constant ``a`` >= 0) with ``e`` another loop
    dimension of extent at most ``c``, inside a tensor dimension of ``size``: each value of ``dim``
    reaches a block of its own, all blocks alike (a head's columns of a projection, ``128*h + n``;
    the keys' part of a fused projection, ``768 + 64*h + k``), so slabs over ``dim`` cut what the
    access reaches in equal disjoint parts, as a plain index does."""
    parsed = _linear(_BRACKETED.sub(r"\1", expr), units)  # "128*(l1) + (n)" as an importer writes it
    if parsed is None:
        return False
    coefficients, constant = parsed
    stride = coefficients.get(dim, 0)
    rest = [d for d in coefficients if d != dim]
    if constant < 0 or stride < 2 or len(rest) != 1 or coefficients[rest[0]] != 1:
        return False
    return dims[rest[0]] <= stride and constant + stride * (dims[dim] - 1) + dims[rest[0]] <= size


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


def _sizes_below(extent: int) -> list[int]:
    """Slab sizes tried: powers of two below the extent."""
    out, size = [], 1
    while size < extent:
        out.append(size)
        size *= 2
    return out


def best_slab(capacity, names, moved, outer_moved, held, invariants, spec, extent, outer_extent,
              resident_t, charged, outer_charged, loops=()) -> Group | None:
    """The group of operators ``names`` run in slabs over ``spec`` with the least traffic: for
    every slab size (and outer slab size) that fits ``capacity``, the largest invariants made
    resident first while they fit; None when no slab size fits. ``loops``: the inner loop of each
    operator when there are several (:mod:`loopwise.memory.segments`); an invariant used in
    several (its last field) is loaded again by every outer slab when not kept, not by every
    inner slab."""
    length = len(held["both"])
    best = None
    for outer_size in (_sizes_below(outer_extent) if outer_extent > 1 else [1]):
        outer_count = math.ceil(outer_extent / outer_size)
        fo = outer_size / outer_extent
        # an invariant of the inner slabs held at its size for one outer slab; the largest first
        items = sorted(((whole * fo if by_outer else whole, loaded, a, z, name, by_outer, spans)
                        for whole, loaded, a, z, name, by_outer, spans in invariants), key=lambda v: -v[0])
        # streamed_cover[p]: bytes the p largest invariants hold at each operator, if streamed
        sizes_held = np.array([v[0] for v in items], dtype=float)
        steps = np.zeros((len(items), length + 1))
        if items:
            rows = np.arange(len(items))
            np.add.at(steps, (rows, [v[2] for v in items]), sizes_held)
            np.add.at(steps, (rows, [v[3] + 1 for v in items]), -sizes_held)
        streamed_cover = np.vstack([np.zeros(length), np.cumsum(np.cumsum(steps, axis=1)[:, :length], axis=0)])
        kept = np.concatenate([[0.0], np.cumsum(sizes_held)])
        total_cover = streamed_cover[-1]
        # what the invariants beyond the p largest move when streamed: per inner slab, or per
        # inner slab of every outer slab (an invariant of both levels)
        loaded = np.array([v[1] for v in items], dtype=float)
        per_inner = np.array([v[1] if v[5] and not v[6] else 0.0 for v in items])
        per_outer = np.array([v[1] if v[6] else 0.0 for v in items])  # by every outer slab
        per_both = loaded - per_inner - per_outer
        resident_prefix = np.concatenate([[0.0], np.cumsum(loaded)])
        inner_suffix = np.concatenate([np.cumsum(per_inner[::-1])[::-1], [0.0]])
        both_suffix = np.concatenate([np.cumsum(per_both[::-1])[::-1], [0.0]])
        outer_suffix = np.concatenate([np.cumsum(per_outer[::-1])[::-1], [0.0]])
        for size in _sizes_below(extent):
            count = math.ceil(extent / size)
            work = (held["both"] * fo * size / extent + held["inner"] * size / extent + held["whole"]
                    + held["span"] * fo)
            peaks = (work[None, :] + total_cover[None, :] - streamed_cover).max(axis=1) + kept
            fits = np.nonzero(peaks <= capacity)[0]
            if not len(fits):
                break  # a larger slab holds more
            p = int(fits.max())
            # resident: loaded once; streamed: by every inner slab (of every outer slab, for an
            # invariant of both levels)
            traffic = moved + outer_count * (outer_moved + outer_suffix[p]) + resident_prefix[p] + count * (
                inner_suffix[p] + outer_count * both_suffix[p])
            # at equal traffic the larger slab wins: fewer slabs, fewer DMA descriptors
            if best is None or traffic < best[0] or (traffic == best[0] and size * outer_size > best[1] * best[2]):
                held_at = work + total_cover - streamed_cover[p] + kept[p]
                best = (traffic, size, outer_size, p, int(peaks[p]), held_at, items, count, outer_count)
    if best is None:
        return None
    traffic, size, outer_size, p, peak, held_at, items, count, outer_count = best
    occupancy = tuple(held_at.astype(np.int64).tolist())
    per_op = charged + outer_count * outer_charged
    for v in items[:p]:
        per_op[v[2]] += v[1]
    for v in items[p:]:
        per_op[v[2]] += v[1] * (outer_count if v[6] else count * (1 if v[5] else outer_count))
    per_op = tuple(np.rint(per_op).astype(np.int64).tolist())  # halves to even, as round() does
    outer = tuple(o for o, _ in spec) if spec[0][0] is not None else None
    slab = Slab(tuple(d for _, d in spec), extent, size, tuple(v[4] for v in items[:p]),
                tuple(v[4] for v in items[p:]), outer, outer_extent, outer_size,
                tuple(loops) if len(set(loops)) > 1 else ())
    return Group(names, int(traffic), peak, resident_t, slab=slab, occupancy=occupancy, per_operator=per_op)
