"""The tile of a tiling that touches the most of a tensor: what the tensor's buffer must hold
(:func:`largest`), counted with :func:`loopwise.memory.polyhedral.footprint`.

Along a loop dimension the full tiles touch alike when moving a tile moves what it touches and
nothing of it is cut off: the tensor is read through one access, every index expression naming the
dimension is affine (no division) and stays inside the tensor over the whole loop space, and no
guard names the dimension. Such a dimension is measured at its first tile (the last, partial tile
touches a part of what a full one would). Every other dimension the tensor's accesses name is one
along which tiles differ: padding cuts off the tiles near either end (as many as the halo is wide
in tiles), a division makes tiles alternate, a guard (a part of a concatenation) or a slice reads
the tensor along a stretch of the dimension only. Along those the tiles are searched, one
dimension at a time with the others held: the first three, the middle three and the last three
tiles of the stretch where the tensor is read, then a climb to a neighbour while it touches more.
Padding makes the count along a dimension rise, stay and fall, so the climb ends at its top; the
middle three cover a division's alternation. Dimensions that share no index expression and no
guard change independent factors of the count (for one access), so each group of dimensions that
do is searched alone, once for the group's tile sizes whatever the other dimensions' sizes are;
within a group the dimensions are searched again until a round changes nothing.
"""

from __future__ import annotations

import re

_DIVISION = re.compile(r"floor|ceil|mod|/")
_WORD = re.compile(r"[A-Za-z_]\w*")
_CLIMB = 64  # steps a climb takes at most along one dimension

_shapes: dict[tuple, tuple] = {}
_largest: dict[tuple, int] = {}
_along: dict[tuple, dict[str, int]] = {}


def largest(op, tensor: str, size: dict[str, int]) -> int:
    """Elements of ``tensor`` that the tile of ``op`` touching the most of it touches, tiles of
    ``size`` per dimension (each at most its extent)."""
    from loopwise.memory.polyhedral import footprint

    key = _key(op, tensor)
    if not key[3]:  # no access touches it
        return 0
    named, varying, ranges, group = _shape(op, tensor, key)
    sizes = tuple((d, size[d]) for d in named)
    if (key, sizes) in _largest:
        return _largest[(key, sizes)]
    base = {d: (0, size[d]) for d in named}
    moving = {d: size[d] for d in varying if size[d] < op.dims[d]}
    if not moving:
        n = footprint(op, tensor, base)
    elif ranges is None:  # no iteration point reads it: no tile touches it
        n = 0
    elif (at := _each(op, tensor, key, base, moving, ranges, group)) is not None:
        n = footprint(op, tensor, base | {d: (i * moving[d], moving[d]) for d, i in at.items()})
    else:
        n = _search(op, tensor, base, moving, ranges, list(moving), 3)[0]
    if n == 0 and moving and ranges is not None:  # the search met no tile that reads it: held whole
        n = footprint(op, tensor, {})
    for memo in (_largest, _along):
        if len(memo) > 65536:
            memo.clear()
    _largest[(key, sizes)] = n
    return n


def _each(op, tensor: str, key: tuple, base: dict, moving: dict[str, int], ranges: dict, group: dict):
    """The best tile index along each cut dimension. Dimensions that share no index and no guard
    change independent factors of the count: the best tiles of each group of them are found once
    for the sizes of the group, whatever the others are. None where a search met no tile that
    reads the tensor."""
    at = {}
    for members in dict.fromkeys(group[d] for d in moving):
        mine = [d for d in moving if d in members]
        memo = (key, tuple((e, base[e][1]) for e in base if e in members))
        if memo not in _along:
            best, where = _search(op, tensor, base, moving, ranges, mine, 1 if len(mine) == 1 else 3)
            if best == 0:
                return None
            _along[memo] = {d: where[d] for d in mine}
        at |= _along[memo]
    return at


def _key(op, tensor: str) -> tuple:
    t = op.tensor(tensor)
    return tuple(op.dims.items()), t.name, t.shape, tuple(dict.fromkeys((a.index, a.guard) for a in op.accesses(tensor)))


def _shape(op, tensor: str, key: tuple):
    """(the dimensions the accesses name, those along which tiles differ, per such dimension the
    first and last point where the tensor is read, or None where it is read nowhere; per such
    dimension, the dimensions it shares an index expression or a guard with, itself included)."""
    if key not in _shapes:
        _shapes[key] = _analyse(op, tensor, key)
    return _shapes[key]


def _analyse(op, tensor: str, key: tuple):
    import islpy as isl

    from loopwise.memory.polyhedral import access_relation

    dims, _, shape, maps = key
    names = [d for d, _ in dims]
    box = isl.Set(f"{{ [{', '.join(names)}] : " + " and ".join(f"0 <= {d} < {e}" for d, e in dims) + " }")
    words = lambda text: [d for d in names if d in set(_WORD.findall(text))]  # noqa: E731
    named = [d for d in names if any(d in words(e) for index, guard in maps for e in (*index, guard))]
    varying: set[str] = set()
    joined = {d: {d} for d in named}
    for index, guard in maps:
        varying |= set(words(guard))
        for e in (*index, guard):
            _join(joined, words(e))
        for j, e in enumerate(index):
            if _DIVISION.search(e) or not _inside(isl, box, names, e, shape[j]):
                varying |= set(words(e))
    if len(maps) > 1:  # several accesses move apart as a tile moves
        varying = set(named)
        _join(joined, named)
    varying_list = [d for d in named if d in varying]
    ranges = {}
    if varying_list:
        read = access_relation(op, tensor).domain().intersect(box)
        ranges = None if read.is_empty() else {
            d: (read.dim_min_val(names.index(d)).to_python(), read.dim_max_val(names.index(d)).to_python())
            for d in varying_list}
    return tuple(named), tuple(varying_list), ranges, {d: frozenset(joined[d]) for d in varying_list}


def _join(joined: dict[str, set], dims: list[str]) -> None:
    """Merge the groups of ``dims`` (every member of a group maps to the same set)."""
    if len(dims) < 2:
        return
    merged = set().union(*(joined[d] for d in dims))
    for d in merged:
        joined[d] = merged


def _inside(isl, box, names: list[str], expression: str, extent: int) -> bool:
    image = box.apply(isl.Map(f"{{ [{', '.join(names)}] -> [{expression}] }}"))
    return image.is_subset(isl.Set(f"{{ [x] : 0 <= x < {extent} }}"))


def _search(op, tensor: str, base: dict, size: dict[str, int], ranges: dict, along: list[str], rounds: int):
    """(the most a tile touches of ``tensor``, the tile index per dimension of ``size`` where it
    does), searched along the dimensions ``along``, the other dimensions of ``size`` at the middle
    of where the tensor is read and the rest at ``base``; ``rounds`` at most."""
    from loopwise.memory.polyhedral import footprint

    span, options = {}, {}
    for d, s in size.items():
        lo, hi = ranges[d][0] // s, ranges[d][1] // s
        mid = (lo + hi) // 2
        span[d] = (lo, hi)
        options[d] = sorted({i for i in (lo, lo + 1, lo + 2, mid - 1, mid, mid + 1, hi - 2, hi - 1, hi) if lo <= i <= hi})
    measure = lambda at: footprint(op, tensor, base | {d: (i * size[d], size[d]) for d, i in at.items()})  # noqa: E731
    at = {d: (lo + hi) // 2 for d, (lo, hi) in span.items()}
    best = measure(at)
    for _ in range(rounds):
        moved = False
        for d in along:
            for i in options[d]:
                if i != at[d] and (n := measure(at | {d: i})) > best:
                    best, at, moved = n, at | {d: i}, True
            for step in (-1, 1):
                for _ in range(_CLIMB):
                    i = at[d] + step
                    if not span[d][0] <= i <= span[d][1] or (n := measure(at | {d: i})) <= best:
                        break
                    best, at, moved = n, at | {d: i}, True
        if not moved:
            break
    return best, at
