"""Exact counts for a tensor read through one plain affine access, without islpy: what
:mod:`loopwise.memory.polyhedral` and :mod:`loopwise.memory.tiling` count with isl, for the
accesses whose touched set is a product.

An access is *separable* when it is the tensor's only access, every index is an integer
combination of loop dimensions plus a constant (``"2*p + r - 1"``), no loop dimension appears in
two indices, and its guard, if any, bounds indices alone (``3 <= c <= 7`` where the index is
``c - 3``: a part of a concatenation), which narrows the range of that index's values. A box of the loop space then touches, along each tensor dimension, the
values its index takes over the box, clipped to the tensor (the padding is no element), and the
touched set is the product of these per-dimension sets: its size is the product of their sizes,
and the intersection of two such sets is the product of the per-dimension intersections. The
per-dimension value sets are kept as sorted disjoint half-open intervals.

Counting the traffic of a tiling (:func:`tensor_traffic`) then needs sums over tiles of products
of per-dimension quantities. Tiles are visited in lexicographic order of the tile grid; a tile
whose last nonzero coordinate is ``j`` follows the tile that agrees before ``j``, is one less at
``j`` and is last after ``j``. For each ``j`` the sum over the free coordinates of a product of
per-index factors, each depending on the coordinates of its own dimensions only, is the product
of the per-index sums: each is a small sum over one or two tile coordinates, cached across calls
(a tiling search changes one dimension at a time).

Every function returns None where its case does not hold; the caller then counts with isl.
"""

from __future__ import annotations

import itertools
import math
import re
from functools import lru_cache

from loopwise.memory.ir import Operator

_TERM = re.compile(r"^(?:(\d+)\*)?([A-Za-z_]\w*)(?:\*(\d+))?$|^(\d+)$")
_WRAPPED = re.compile(r"\(([A-Za-z_]\w*|\d+)\)")
_MAX_PIECES = 1 << 16  # a value set of more intervals than this is left to isl

# ((dim, coefficient), ...), constant, and the range [lo, hi) of the index's values that are elements
Position = tuple[tuple[tuple[str, int], ...], int, int, int]


def parse_affine(expr: str, dims) -> tuple[tuple[tuple[str, int], ...], int] | None:
    """``expr`` as ((dimension, coefficient), ...) and a constant, or None where it is not a plain
    integer combination of ``dims``."""
    text = expr.replace(" ", "")
    while True:  # a name or a number in parentheses is that name or number: "64*(l1) + ((k))"
        bare = _WRAPPED.sub(r"\1", text)
        if bare == text:
            break
        text = bare
    if not text or text[0] not in "+-":
        text = "+" + text
    coefs: dict[str, int] = {}
    const = 0
    pos = 0
    for m in re.finditer(r"([+-])([^+-]+)", text):
        if m.start() != pos:
            return None
        pos = m.end()
        sign = -1 if m.group(1) == "-" else 1
        t = _TERM.match(m.group(2))
        if t is None:
            return None
        if t.group(4) is not None:
            const += sign * int(t.group(4))
            continue
        if t.group(1) is not None and t.group(3) is not None:
            return None
        name = t.group(2)
        if name not in dims:
            return None
        coefs[name] = coefs.get(name, 0) + sign * int(t.group(1) or t.group(3) or 1)
    if pos != len(text):
        return None
    return tuple((d, c) for d, c in coefs.items() if c), const


@lru_cache(maxsize=8192)
def _positions(dims: tuple[str, ...], shape: tuple[int, ...], accesses: tuple) -> tuple[Position, ...] | None:
    if len(accesses) != 1:
        return None
    index, guard = accesses[0]
    out, seen = [], set()
    for expr, bound in zip(index, shape):
        parsed = parse_affine(expr, dims)
        if parsed is None:
            return None
        terms, const = parsed
        names = {d for d, _ in terms}
        if names & seen:
            return None
        seen |= names
        out.append([terms, const, 0, bound])
    for part in filter(None, (p.strip() for p in guard.split(" and "))):
        # ``lo <= E < hi`` with E an index less a constant: a narrower range of that index's values
        m = re.fullmatch(r"(-?\d+)\s*<=\s*(.+?)\s*(<=?)\s*(-?\d+)", part)
        parsed = m and parse_affine(m.group(2), dims)
        at = [p for p in out if parsed and p[0] and dict(p[0]) == dict(parsed[0])]
        if not at:
            return None
        shift = at[0][1] - parsed[1]
        hi = int(m.group(4)) + (1 if m.group(3) == "<=" else 0)
        at[0][2], at[0][3] = max(at[0][2], int(m.group(1)) + shift), min(at[0][3], hi + shift)
    return tuple(tuple(p) for p in out)


def positions(op: Operator, tensor: str) -> tuple[Position, ...] | None:
    """The tensor's indices as (terms, constant, extent) when its access is separable, else None."""
    t = op.tensor(tensor)
    return _positions(tuple(op.dims), t.shape, tuple((a.index, a.guard) for a in op.accesses(tensor)))


@lru_cache(maxsize=1 << 17)
def values(terms: tuple[tuple[int, int, int], ...], const: int, low: int, high: int) -> tuple[tuple[int, int], ...]:
    """The values of ``const + sum(c * x)`` over ``lo <= x < hi`` for each (c, lo, hi) of
    ``terms``, inside ``[low, high)``, as sorted disjoint half-open intervals (an empty range: none)."""
    spans = [(const, const + 1)]
    for c, lo, hi in sorted(terms, key=lambda term: abs(term[0])):
        n = hi - lo
        if n <= 0:
            return ()
        step = abs(c)
        shift = c * lo if c > 0 else c * (hi - 1)
        if n == 1:
            spans = [(a + shift, b + shift) for a, b in spans]
        elif len(spans) == 1 and spans[0][1] - spans[0][0] >= step:
            a, b = spans[0]
            spans = [(a + shift, b + shift + step * (n - 1))]
        else:
            if len(spans) * n > _MAX_PIECES:
                raise _TooMany
            spans = _merge(sorted((a + shift + step * y, b + shift + step * y) for y in range(n) for a, b in spans))
    return tuple((max(a, low), min(b, high)) for a, b in spans if a < high and b > low)


class _TooMany(Exception):
    pass


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = [spans[0]]
    for a, b in spans[1:]:
        if a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def size(spans) -> int:
    return sum(b - a for a, b in spans)


def common(first, second) -> int:
    """Points in both interval lists."""
    i = j = n = 0
    while i < len(first) and j < len(second):
        a, b = first[i]
        c, d = second[j]
        lo, hi = max(a, c), min(b, d)
        if lo < hi:
            n += hi - lo
        if b <= d:
            i += 1
        else:
            j += 1
    return n


def box_footprint(op: Operator, tensor: str, box: dict[str, tuple[int, int]]) -> int | None:
    """Elements of ``tensor`` the box ``{dim: (lo, hi)}`` of ``op``'s loop space touches (a
    dimension left out spans its extent; the box is clipped to the loop bounds), or None where
    the access is not separable."""
    pos = positions(op, tensor)
    if pos is None:
        return None
    ranges = {}
    for d, e in op.dims.items():
        lo, hi = box.get(d, (0, e))
        lo, hi = max(lo, 0), min(hi, e)
        if lo >= hi:
            return 0
        ranges[d] = (lo, hi)
    try:
        return math.prod(size(values(tuple((c, *ranges[d]) for d, c in terms), const, lo, hi))
                         for terms, const, lo, hi in pos)
    except _TooMany:
        return None


# A tile-grid dimension as an index of one tensor sees it: (dim, extent, tile size, tile count,
# role), the role saying which tile coordinates a sum runs over for the tile t and the tile u
# before it: "all" (t = u, every coordinate), "step" (t from 1, u = t - 1), "ends" (t = 0,
# u = the last), "rest" (t from 1, for sums of t alone), "first" (t = 0 alone).
_ROLES = {"all": lambda c: [(x, x) for x in range(c)], "step": lambda c: [(x, x - 1) for x in range(1, c)],
          "ends": lambda c: [(0, c - 1)], "rest": lambda c: [(x, x) for x in range(1, c)], "first": lambda c: [(0, 0)]}


def _span(extent: int, tile: int, count: int, x: int, mirror: bool) -> tuple[int, int]:
    if mirror:
        x = count - 1 - x
    return tile * x, min(tile * x + tile, extent)


@lru_cache(maxsize=1 << 16)
def _index_sum(position: Position, fixed: tuple, cut: tuple, mirror: bool, both: bool) -> int:
    """Over the tile coordinates of the cut dimensions ``cut`` (each with its role), the sum of
    the index's value count at t (``both`` false) or of its values common to t and u (``both``);
    ``fixed`` gives the ranges of the index's dimensions held whole."""
    terms, const, low, high = position
    coef = dict(terms)
    whole = tuple((coef[d], lo, hi) for d, lo, hi in fixed)
    total = 0
    for pairs in itertools.product(*(_ROLES[role](count) for _, _, _, count, role in cut)):
        at = whole + tuple((coef[d], *_span(e, s, n, t, mirror)) for (d, e, s, n, _), (t, _u) in zip(cut, pairs))
        here = values(at, const, low, high)
        if not both or all(t == u for t, u in pairs):
            total += size(here)
            continue
        before = whole + tuple((coef[d], *_span(e, s, n, u, mirror)) for (d, e, s, n, _), (_t, u) in zip(cut, pairs))
        total += common(here, values(before, const, low, high))
    return total


class _Grid:
    def __init__(self, op: Operator, grid: tuple[str, ...], tiles: dict[str, int], counts: dict[str, int]):
        self.op, self.grid, self.tiles, self.counts = op, grid, tiles, counts
        self.at = {d: i for i, d in enumerate(grid)}

    def factor(self, position: Position, roles, mirror: bool, both: bool) -> int:
        """The per-index sum with ``roles(i)`` the role of the grid dimension at ``i``."""
        fixed, cut = [], []
        for d, _ in position[0]:
            if d in self.at:
                cut.append((d, self.op.dims[d], self.tiles[d], self.counts[d], roles(self.at[d])))
            else:
                fixed.append((d, 0, self.op.dims[d]))
        return _index_sum(position, tuple(fixed), tuple(cut), mirror, both)


def touched_total(op: Operator, tensor: str, grid: tuple[str, ...], tiles: dict[str, int],
                  counts: dict[str, int]) -> int | None:
    """The elements of ``tensor`` each tile touches, added up over the tiles (None: not separable)."""
    pos = positions(op, tensor)
    if pos is None:
        return None
    g = _Grid(op, grid, tiles, counts)
    named = {d for p in pos for d, _ in p[0]}
    try:
        return (math.prod(g.factor(p, lambda i: "all", False, False) for p in pos)
                * math.prod(counts[d] for d in grid if d not in named))
    except _TooMany:
        return None


def tensor_traffic(op: Operator, tensor: str, written: bool, grid: tuple[str, ...], tiles: dict[str, int],
                   counts: dict[str, int]) -> tuple[int, int] | None:
    """(elements loaded, elements stored) of ``tensor`` when ``op`` runs tile by tile over ``grid``
    (outermost first; ``tiles`` the tile sizes, ``counts`` the tiles per dimension), as
    :func:`loopwise.memory.tiling.traffic` counts them; None where the access is not separable, or
    where ``tensor`` is written and its tiles overlap without being equal."""
    pos = positions(op, tensor)
    if pos is None:
        return None
    total = touched_total(op, tensor, grid, tiles, counts)
    if total is None:
        return None
    g = _Grid(op, grid, tiles, counts)
    named = {d for p in pos for d, _ in p[0]}
    c = [counts[d] for d in grid]
    spare = [d not in named for d in grid]
    try:

        def repeat(mirror: bool) -> int:
            """Elements the tiles (in the order, or against it) hold of what the tile before held."""
            out = 0
            for j in range(len(grid)):
                roles = lambda i: "all" if i < j else "step" if i == j else "ends"  # noqa: E731
                n = math.prod(g.factor(p, roles, mirror, True) for p in pos)
                out += n * math.prod(x for x, s in zip(c[:j], spare[:j]) if s) * (c[j] - 1 if spare[j] else 1)
            return out

        if not written:
            return total - repeat(False), 0
        stores = total - repeat(True)
        if not all(_apart(g, p) for p in pos):
            return None
        loads = 0
        for j in range(len(grid)):
            before = math.prod(x for x, s in zip(c[:j], spare[:j]) if s)
            if spare[j]:
                if not any(not s for s in spare[j + 1:]):
                    continue
                roles = lambda i: "all" if i < j else "first"  # noqa: E731
                loads += math.prod(g.factor(p, roles, False, False) for p in pos) * before * (c[j] - 1)
            else:
                roles = lambda i: "all" if i < j else "rest" if i == j else "first"  # noqa: E731
                loads += math.prod(g.factor(p, roles, False, False) for p in pos) * (before - 1)
        return loads, stores
    except _TooMany:
        return None


def _apart(g: _Grid, position: Position) -> bool:
    """Whether the index's value sets of tiles that differ in its cut dimensions never meet: then
    two tiles hold the same elements of the tensor or none in common, and the elements a tile
    reads back are all it holds when an earlier tile with its coordinates exists."""
    fixed, cut = [], []
    for d, _ in position[0]:
        (cut if d in g.at else fixed).append(d)
    if not cut:
        return True
    return _disjoint(position, tuple((d, 0, g.op.dims[d]) for d in fixed),
                     tuple((d, g.op.dims[d], g.tiles[d], g.counts[d]) for d in cut))


@lru_cache(maxsize=1 << 14)
def _disjoint(position: Position, fixed: tuple, cut: tuple) -> bool:
    terms, const, low, high = position
    coef = dict(terms)
    whole = tuple((coef[d], lo, hi) for d, lo, hi in fixed)
    spans, total = [], 0
    for xs in itertools.product(*(range(n) for *_, n in cut)):
        here = values(whole + tuple((coef[d], *_span(e, s, n, x, False)) for (d, e, s, n), x in zip(cut, xs)),
                      const, low, high)
        total += size(here)
        spans.extend(here)
    return not spans or size(_merge(sorted(spans))) == total
