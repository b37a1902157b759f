"""DRAM traffic of one operator under a tiling, counted exactly with islpy.

A tiling is a tile size per loop dimension and an order of the tile loops (outermost first). The
scratchpad holds each tensor's data for the current tile; moving to the next tile loads only what
the previous tile did not already hold (halo reuse between consecutive tiles, and a stationary
tensor is not reloaded at all). An output tile is stored when the next tile no longer covers it,
and read back when a later tile returns to it (partial sums, when a reduction loop runs outside an
output loop). Every count is a polyhedral set count: the pairs (tile, element) of "loaded at this
tile", never a per-tile estimate, so boundary tiles, padding and strides are exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loopwise.memory.boxcount import tensor_traffic, touched_total
from loopwise.memory.ir import Operator
from loopwise.memory.polyhedral import access_relation


@dataclass(frozen=True)
class Traffic:
    """Elements moved for one tensor (multiply by its element size for bytes)."""

    loads: int
    stores: int

    @property
    def total(self) -> int:
        return self.loads + self.stores


def tile_sizes(op: Operator, tiles: dict[str, int]) -> dict[str, int]:
    """Every loop dimension's tile size (a dimension left out, or a size past its extent, is whole)."""
    for dim, size in tiles.items():
        if dim not in op.dims:
            raise ValueError(f"{op.name}: unknown loop dimension {dim!r}")
        if int(size) < 1:
            raise ValueError(f"{op.name}: tile size {size} for {dim}")
    return {d: min(int(tiles.get(d, e)), e) for d, e in op.dims.items()}


def tile_counts(op: Operator, tiles: dict[str, int]) -> dict[str, int]:
    return {d: math.ceil(op.dims[d] / s) for d, s in tile_sizes(op, tiles).items()}


def tile_grid(op: Operator, tiles: dict[str, int], order) -> tuple[str, ...]:
    """The dimensions of the tile grid, outermost first: those of ``order`` cut into more than one
    tile (a dimension held whole adds nothing to the order between tiles, and every grid dimension
    makes the counting dearer), or the first of ``order`` when none is. The traffic of a tiling
    (:func:`traffic`) depends on the order through these alone."""
    counts = tile_counts(op, tiles)
    return tuple(d for d in order if counts[d] > 1) or (order[0],)


def _check_order(op: Operator, order) -> None:
    if sorted(order) != sorted(op.dims):
        raise ValueError(f"{op.name}: the order must name every loop dimension once ({', '.join(op.dims)})")


def _maps(op: Operator, tiles: dict[str, int], order: list[str], names=None):
    """(tile -> elements of each tensor (of ``names``, default all), prev and next tile maps,
    earlier-tiles map)."""
    import islpy as isl

    _check_order(op, order)
    size, counts = tile_sizes(op, tiles), tile_counts(op, tiles)
    cut = list(tile_grid(op, tiles, order))
    t_vars = [f"t_{d}" for d in cut]
    grid = isl.Set(f"{{ [{', '.join(t_vars)}] : " + " and ".join(f"0 <= t_{d} < {counts[d]}" for d in cut) + " }")
    bounds = []
    for d, e in op.dims.items():
        if d in cut:
            bounds.append(f"{size[d]}*t_{d} <= {d} < {size[d]}*t_{d} + {size[d]} and 0 <= {d} < {e}")
        else:
            bounds.append(f"0 <= {d} < {e}")
    cover = isl.Map(f"{{ [{', '.join(t_vars)}] -> [{', '.join(op.dims)}] : " + " and ".join(bounds) + " }")
    elements = {t.name: cover.apply_range(access_relation(op, t.name)).intersect_domain(grid) for t in op.tensors
                if names is None or t.name in names}
    earlier = grid.lex_gt_set(grid)  # t -> every tile before t
    prev = earlier.lexmax()
    return elements, prev, prev.reverse(), earlier


def traffic(op: Operator, tiles: dict[str, int], order: list[str]) -> dict[str, Traffic]:
    """Per tensor, the elements loaded and stored when ``op`` runs tile by tile in ``order``. A
    tensor with a separable access (:mod:`loopwise.memory.boxcount`) is counted in closed form,
    the others with isl (:func:`traffic_isl`)."""
    _check_order(op, order)
    grid, size, counts = tile_grid(op, tiles, order), tile_sizes(op, tiles), tile_counts(op, tiles)
    written = {a.tensor for a in op.writes}
    out = {}
    for t in op.tensors:
        moved = tensor_traffic(op, t.name, t.name in written, grid, size, counts)
        if moved is not None:
            out[t.name] = Traffic(*moved)
    rest = [t.name for t in op.tensors if t.name not in out]
    if rest:
        out.update(traffic_isl(op, tiles, order, rest))
    return {t.name: out[t.name] for t in op.tensors}


def traffic_isl(op: Operator, tiles: dict[str, int], order: list[str], names=None) -> dict[str, Traffic]:
    """:func:`traffic` counted with isl for every tensor (of ``names``, default all)."""
    elements, prev, nxt, earlier = _maps(op, tiles, order, names)
    written = {a.tensor for a in op.writes}
    out = {}
    for name, touched in elements.items():
        fresh = touched.subtract(prev.apply_range(touched))  # not held from the previous tile
        if name in written:
            # read back only what an earlier tile already wrote (a partial sum); stored when the next
            # tile does not hold it any more (and everything the last tile holds)
            loads = fresh.intersect(earlier.apply_range(touched))
            stores = touched.subtract(nxt.apply_range(touched))
            out[name] = Traffic(_count(loads), _count(stores))
        else:
            out[name] = Traffic(_count(fresh), 0)
    return out


def touched_per_tile(op: Operator, tiles: dict[str, int]) -> dict[str, int]:
    """Per tensor, the elements each tile touches, added up over the tiles: what a tensor loaded
    afresh by every tile moves, nothing kept from one tile to the next."""
    grid, size, counts = tile_grid(op, tiles, list(op.dims)), tile_sizes(op, tiles), tile_counts(op, tiles)
    out = {t.name: touched_total(op, t.name, grid, size, counts) for t in op.tensors}
    rest = [name for name, n in out.items() if n is None]
    if rest:
        out.update({name: _count(touched) for name, touched in _maps(op, tiles, list(op.dims), rest)[0].items()})
    return out


def traffic_bytes(op: Operator, tiles: dict[str, int], order: list[str]) -> int:
    sizes = {t.name: t.elem_bytes for t in op.tensors}
    return sum(v.total * sizes[k] for k, v in traffic(op, tiles, order).items())


def buffer_bytes(op: Operator, tiles: dict[str, int]) -> int:
    """Scratchpad bytes the largest tile holds: the sum of :func:`tile_footprints` in bytes."""
    sizes = {t.name: t.elem_bytes for t in op.tensors}
    return sum(n * sizes[t] for t, n in tile_footprints(op, tiles).items())


def tile_footprints(op: Operator, tiles: dict[str, int]) -> dict[str, int]:
    """Per tensor, the elements of it the tile that holds the most of it touches, over every tile
    of the grid: the first, the interior ones and the last, partial one
    (:func:`loopwise.memory.largest_tile.largest`). A dimension none of the tensor's accesses names
    changes nothing of what a tile touches, so tilings that differ there share a count."""
    from loopwise.memory.largest_tile import largest

    size = tile_sizes(op, tiles)
    return {t.name: largest(op, t.name, size) for t in op.tensors}


def _count(relation) -> int:
    from loopwise.memory.polyhedral import count

    return count(relation.wrap())
