"""Exact footprints with the polyhedral model (islpy): the elements of a tensor that a tile of an
operator's iteration space touches, counted exactly (:func:`count`), never as a bounding box
(a stride-2 read of 7x7 outputs touches 49 points where its box holds 169).

A tile is a box of the loop space, ``{dim: (start, size)}``; dimensions left out span their whole
extent, and the box is clipped to the loop bounds. Padding needs no special case: an index outside
the tensor is not an element, so the image is intersected with the tensor's own domain.
"""

from __future__ import annotations

import math
from functools import lru_cache

from loopwise.memory.ir import Operator

Tile = dict[str, tuple[int, int]]


def _isl():
    import islpy

    return islpy


def _domain(op: Operator, tile: Tile) -> str:
    for dim in tile:
        if dim not in op.dims:
            raise ValueError(f"{op.name}: unknown loop dimension {dim!r} (it has {', '.join(op.dims)})")
    bounds = []
    for dim, extent in op.dims.items():
        bounds.append(f"0 <= {dim} < {extent}")
        if dim in tile:
            start, size = tile[dim]
            bounds.append(f"{int(start)} <= {dim} < {int(start) + int(size)}")
    return f"[{', '.join(op.dims)}] : {' and '.join(bounds)}"


@lru_cache(maxsize=4096)
def _relation(dims: tuple[str, ...], tensor: str, shape: tuple[int, ...], maps: tuple[str, ...]):
    isl = _isl()
    space = ", ".join(f"i{j}" for j in range(len(shape)))
    inside = isl.Set(f"{{ {tensor}[{space}] : " + " and ".join(f"0 <= i{j} < {d}" for j, d in enumerate(shape)) + " }")
    relation = None
    for index, guard in maps:
        part = isl.Map(f"{{ [{', '.join(dims)}] -> {tensor}[{index}]" + (f" : {guard}" if guard else "") + " }")
        relation = part if relation is None else relation.union(part)
    return relation.intersect_range(inside)


def count(points) -> int:
    """The number of points of an islpy set, exactly. ``count_val`` walks the points row by row,
    which for a batch of 32 feature maps takes a tenth of a second per count; a basic set whose
    variables split into independent factors (no constraint and no existential variable joins two
    of them) is the product of those factors, each counted alone and small. The set is first made
    a disjoint union, so the pieces add up; any piece that does not split is counted by isl."""
    isl = _isl()
    total = 0
    for piece in points.coalesce().make_disjoint().get_basic_sets():
        total += _count_basic(isl, piece)
    return total


def _count_basic(isl, piece) -> int:
    kind = isl.dim_type.set
    n = piece.dim(kind)
    factors = _factors(isl, piece) if n else []
    if len(factors) < 2:
        return int(isl.Set.from_basic_set(piece).count_val().to_python())
    total = 1
    for members in factors:
        part = piece
        for j in reversed(range(n)):
            if j not in members:
                part = part.project_out(kind, j, 1)
        total *= int(isl.Set.from_basic_set(part).count_val().to_python())
        if total == 0:
            return 0
    return total


def _factors(isl, piece) -> list[set[int]]:
    """The set variables of ``piece`` in groups that no constraint joins: variables are joined by a
    constraint naming both, and through an existential variable (a stride's ``exists e: i = 2e``,
    or a division ``floor((t + i)/2)``) that a constraint or a division names along with them. An
    empty list when some group holds existential variables only (a constraint on them alone could
    make the set empty, which no product of the other groups would show)."""
    kind, local = isl.dim_type.set, isl.dim_type.div
    n, divs = piece.dim(kind), piece.dim(local)
    parent = list(range(n + divs))  # set variables 0..n-1, then the existential ones

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(nodes: list[int]) -> None:
        for j in nodes[1:]:
            parent[root(j)] = root(nodes[0])

    space = piece.get_local_space()
    for k in range(divs):
        try:  # an existential variable defined as the floor of an expression of the set variables
            division = space.get_div(k)
        except isl.Error:  # one known by its constraints alone
            continue
        if _named(division, local, division.dim(local), 0):  # a division inside a division: join all
            join(list(range(n + divs)))
        join([n + k] + _named(division, isl.dim_type.in_, n, 0))
    for c in piece.get_constraints():
        join(_named(c, kind, n, 0) + _named(c, local, divs, n))
    groups: dict[int, set[int]] = {}
    for j in range(n + divs):
        groups.setdefault(root(j), set()).add(j)
    factors = [{j for j in g if j < n} for g in groups.values()]
    return [] if any(not f for f in factors) else factors


def _named(expression, kind, size: int, offset: int) -> list[int]:
    """The variables of ``kind`` with a nonzero coefficient in ``expression``, numbered from ``offset``."""
    return [offset + j for j in range(size) if not expression.get_coefficient_val(kind, j).is_zero()]


def access_relation(op: Operator, tensor: str):
    """The islpy map from ``op``'s iteration points to the elements of ``tensor`` they touch (every
    access of it, clipped to the tensor: an index in the padding is no element)."""
    t = op.tensor(tensor)
    return _relation(tuple(op.dims), t.name, t.shape, tuple((", ".join(a.index), a.guard) for a in op.accesses(tensor)))


@lru_cache(maxsize=4096)
def _touched(domain: str, relation):
    return _isl().Set(f"{{ {domain} }}").apply(relation)


def touched(op: Operator, tensor: str, tile: Tile):
    """The islpy set of ``tensor``'s elements the ``tile`` touches (for unions across operators)."""
    return _touched(_domain(op, tile), access_relation(op, tensor))


def footprint(op: Operator, tensor: str, tile: Tile) -> int:
    """Elements of ``tensor`` the ``tile`` of ``op`` reads or writes: in closed form where the
    access is separable (:func:`loopwise.memory.boxcount.box_footprint`), else with isl."""
    from loopwise.memory.boxcount import box_footprint

    domain = _domain(op, tile)  # checks the tile's dimensions
    n = box_footprint(op, tensor, {d: (int(s), int(s) + int(z)) for d, (s, z) in tile.items()})
    return n if n is not None else footprint_isl(op, tensor, tile, domain)


def footprint_isl(op: Operator, tensor: str, tile: Tile, domain: str | None = None) -> int:
    """:func:`footprint` counted with isl."""
    return _footprint(domain or _domain(op, tile), access_relation(op, tensor))


@lru_cache(maxsize=16384)
def _footprint(domain: str, relation) -> int:
    return count(_touched(domain, relation))


def footprint_bytes(op: Operator, tensor: str, tile: Tile) -> int:
    """Bytes of ``tensor`` the ``tile`` touches, counted with isl (the replay's count, kept apart
    from the closed form the planner's :func:`footprint` uses)."""
    return footprint_isl(op, tensor, tile) * op.tensor(tensor).elem_bytes


def overlap(op: Operator, tensor: str, first: Tile, second: Tile) -> int:
    """Elements of ``tensor`` both tiles touch: what a scratchpad keeping the first tile's data saves
    the second (reuse between consecutive tiles)."""
    return count(touched(op, tensor, first).intersect(touched(op, tensor, second)))


def contiguous_runs(op: Operator, tensor: str, tile: Tile) -> int:
    """Maximal runs of consecutive addresses in ``tensor``'s footprint (row-major layout): the DMA
    descriptors a transfer of it needs at least (a footprint that spans whole rows is one run)."""
    isl = _isl()
    t = op.tensor(tensor)
    strides = [math.prod(t.shape[j + 1:]) for j in range(len(t.shape))]
    space = ", ".join(f"i{j}" for j in range(len(t.shape)))
    linear = " + ".join(f"{s}*i{j}" for j, s in enumerate(strides))
    addresses = touched(op, tensor, tile).apply(isl.Map(f"{{ {t.name}[{space}] -> L[{linear}] }}"))
    after = addresses.apply(isl.Map("{ L[a] -> L[a + 1] }"))
    return count(addresses.subtract(after))
