"""A group run tile by tile (``loop_nest.runs == "tiled"``), replayed against the model's graph:
the replay (:mod:`loopwise.memory.verify`) holds its listed loads and stores to the elements the
operator moves when it runs tile by tile in the listed loop order with the listed tile sizes, and
each tensor's buffer to the most any tile touches of it, both counted here from the graph's access
maps with isl (:mod:`loopwise.memory.polyhedral`'s ``footprint_isl`` and ``overlap``, never the
closed form the planner counts separable accesses with).

The tile loops run outermost first, as the nest lists them; iteration ``i`` of a loop over ``D``
of tile ``s`` covers ``[i*s, min(D, (i+1)*s))``, so the last tile of an uneven split is smaller.
Between two tiles in a row a tensor keeps on chip what both touch (a stationary operand is not
loaded again, a convolution's halo is shared); a tile loads what the tile before it did not touch.
So, over the tiles ``t`` in order, with ``T(t)`` the elements of a tensor that tile ``t`` touches:

- an input is loaded ``F = sum |T(t)| - sum |T(t) & T(t-1)|`` elements;
- an output is stored when the next tile no longer touches it: ``F`` again (the same pairs of
  tiles in a row); what a tile touches that an earlier tile touched but the one before it did not
  is a partial sum loaded back: ``F - U``, with ``U`` the elements the whole operator touches. An
  output the group carries on chip to the next group (never freed here) is not stored.

The sums are not taken tile by tile. Along each loop cut into more than one tile a tile is the
first, an interior one or the last (the pairs of tiles in a row likewise), and only the loops a
tensor's accesses name change what it touches: one count per class of tile (or of pair) along those
loops, times the number of tiles in the class. Interior tiles are taken to touch alike; where a
tensor's interior tiles along a loop, probed at both ends and in the middle, do not (a halo wider
than a tile, a division in an index, a guard), every tile along that loop is its own class. The
pair count for the loop that moves at a step holds the loops outside it at their tile and the
loops inside it at their last tile before and their first after.

Each tensor's buffer at its operator's step must hold the most any tile touches of it: the first,
interior and last tiles along every loop are all measured, so a last partial tile, or an interior
one larger than a first clipped by padding, is found; what else is on chip is the replay's
capacity check. A tiled product with an elementwise epilogue (two operators, one nest: the
reader's loops are the product's output loops under its own names) moves the product's operands
and the reader's result as above, the reader's other inputs afresh for every output tile (the sum
of what each output tile touches; they stream through their buffers, which are not held to a tile),
and never the product's own result.

Violations: ``tile_traffic`` (a tensor's listed loads or stores differ from the graph's count),
``tile_fit`` (a tile touches more of a tensor than its buffer holds), ``binding`` (the nest does
not run the operator's dimensions as the graph has them). This module reads the graph and the
plan's JSON; it shares no code with the planner.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from loopwise.memory.ir import Access, Operator, Tensor
from loopwise.memory.verify_verdict import Violation

_DONE = {"load": "loaded", "store": "stored"}


class Tiles:
    """The graph's count of what a tiled group moves and holds, per operator shape and tiling
    (operators that differ only in their tensors' names share the counts)."""

    def __init__(self, compose) -> None:
        self.compose = compose  # name -> the graph's operator, folded operators composed in
        self.memo: dict[tuple, dict[int, tuple[int, int, int]]] = {}

    def check(self, group: dict, where: str, held: dict[str, dict[str, int]]) -> list[Violation]:
        """The violations of a tiled ``group``; ``held``: per step id, the bytes of each tensor on
        chip once the step's buffers are allocated."""
        entries = (group.get("loop_nest") or {}).get("operators") or []
        try:
            ops = [self.compose(e.get("operator")) for e in entries]
        except KeyError:
            return []  # an operator the model has not: the checks against the graph say so
        if len(ops) == 1:
            op, streamed, never = ops[0], set(), set()
        elif len(ops) == 2:
            fused = _epilogue(*ops)
            if isinstance(fused, str):
                return [Violation("binding", where, fused)]
            op, streamed, never = fused
        else:
            return [Violation("binding", where, f"a tiled nest of {len(ops)} operators: one, or a product "
                                                "and its epilogue")]
        grid = _grid(op, entries[0].get("loops", []))
        if isinstance(grid, str):
            return [Violation("binding", where, f"{op.name}: {grid}")]
        if len(ops) == 2 and (bad := _follows(op, entries[1], grid)):
            return [Violation("binding", where, f"{entries[1]['operator']}: {bad}")]
        counts = self._counts(op, grid, streamed)
        return _traffic(op, group, counts, never, where) + _fits(op, group, counts, streamed, held, where)

    def _counts(self, op: Operator, grid: list, streamed: set[str]) -> dict[str, tuple[int, int, int]]:
        """Per tensor: (F, U, the most one tile touches), in elements."""
        names = [t.name for t in op.tensors]
        canon = _canonical(op)
        key = (_signature(canon), tuple(grid), tuple(sorted(names.index(t) for t in streamed)))
        if key not in self.memo:
            out_dims = {w for a in canon.writes for e in a.index for w in _words(e)}
            self.memo[key] = {}
            for j, t in enumerate(canon.tensors):
                if not canon.accesses(t.name):
                    continue  # a folded operator's result, read through its own inputs
                if names[j] in streamed:  # afresh for every output tile: over the output loops alone
                    outer = [g for g in grid if g[0] in out_dims]
                    self.memo[key][j] = (_tiles_sum(canon, t.name, outer)[0], 0, 0)
                else:
                    self.memo[key][j] = _moved(canon, t.name, grid)
        return {names[j]: v for j, v in self.memo[key].items()}


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", text))


def _named(op: Operator, tensor: str) -> set[str]:
    """The loop dimensions an access of ``tensor`` names, in an index or in its guard."""
    return {w for a in op.accesses(tensor) for e in (*a.index, a.guard) for w in _words(e)} & set(op.dims)


def _canonical(op: Operator) -> Operator:
    rename = {t.name: f"t{j}" for j, t in enumerate(op.tensors)}
    moved = lambda a: Access(rename[a.tensor], a.index, a.guard)  # noqa: E731
    return replace(op, name="op", tensors=tuple(Tensor(rename[t.name], t.shape, t.elem_bytes) for t in op.tensors),
                   reads=tuple(map(moved, op.reads)), writes=tuple(map(moved, op.writes)))


def _signature(op: Operator) -> tuple:
    acc = lambda a: (a.tensor, a.index, a.guard)  # noqa: E731
    return (tuple(op.dims.items()), tuple((t.name, t.shape, t.elem_bytes) for t in op.tensors),
            tuple(map(acc, op.reads)), tuple(map(acc, op.writes)))


def _grid(op: Operator, loops: list[dict]):
    """The loops cut into more than one tile, outermost first: (dim, trips, tile, extent); or what
    is wrong with the nest."""
    seen = [l.get("dim") for l in loops]
    if sorted(seen) != sorted(op.dims):
        return f"the tile loops run {', '.join(map(str, seen))}, the model's operator has {', '.join(op.dims)}"
    out = []
    for l in loops:
        dim, extent, tile, trips = l["dim"], int(l["extent"]), int(l["tile"]), int(l.get("trips", 1))
        if extent != op.dims[dim]:
            return f"the nest runs {dim} over {extent}, the model's operator over {op.dims[dim]}"
        if not 1 <= tile <= extent or trips != math.ceil(extent / tile):
            runs = math.ceil(extent / max(tile, 1))
            return f"{dim} of {extent} in tiles of {tile} is {runs} trips, the nest says {trips}"
        if trips > 1:
            out.append((dim, trips, tile, extent))
    return out


def _follows(op: Operator, entry: dict, grid: list) -> str:
    """What is wrong with an epilogue's loops: each must be a product's output loop (``op``: the
    two as one nest, over the product's dimensions) under the reader's name, tiled alike."""
    tiles = {d: (tile, extent) for d, _, tile, extent in grid}
    out = [e for a in op.writes for e in a.index]
    loops = entry.get("loops", [])
    if len(loops) != len(out):
        return f"its loops run {len(loops)} dimensions, the product's output has {len(out)}"
    for l in loops:
        if int(l["tile"]) < int(l["extent"]) and (int(l["tile"]), int(l["extent"])) not in tiles.values():
            return f"{l['dim']} runs in tiles of {l['tile']}, which no loop of the product does"
    return ""


def _epilogue(product: Operator, reader: Operator):
    """``product`` and ``reader`` as one operator over the product's loops, with the reader's
    other inputs (streamed) and the product's own result (never moved); or why they are not."""
    if len(product.writes) != 1 or len(reader.writes) != 1:
        return f"{product.name} and {reader.name}: an epilogue writes one result over one product's"
    mid = product.writes[0]
    of_mid = [a for a in reader.reads if a.tensor == mid.tensor]
    if len(of_mid) != 1 or len(of_mid[0].index) != len(mid.index):
        return f"{reader.name} does not read {product.name}'s {mid.tensor} once, element for element"
    rename = dict(zip(of_mid[0].index, mid.index))
    if any(d not in rename or reader.dims[d] != product.dims.get(rename[d]) for d in reader.dims):
        return f"{reader.name}'s loops are not {product.name}'s output loops"
    word = re.compile(r"\b(" + "|".join(map(re.escape, sorted(rename, key=len, reverse=True))) + r")\b")
    sub = lambda e: word.sub(lambda m: f"({rename[m.group(1)]})", e) if e else e  # noqa: E731
    moved = lambda a: Access(a.tensor, tuple(map(sub, a.index)), sub(a.guard))  # noqa: E731
    others = tuple(moved(a) for a in reader.reads if a.tensor != mid.tensor)
    tensors = {t.name: t for t in product.tensors if t.name != mid.tensor}
    streamed = {a.tensor for a in others} - set(tensors)
    for t in reader.tensors:
        if t.name != mid.tensor:
            tensors.setdefault(t.name, t)
    fused = Operator(product.name, dict(product.dims), tuple(tensors.values()), product.reads + others,
                     tuple(map(moved, reader.writes)))
    return fused, streamed, {mid.tensor}


def _classes(trips: int) -> list[tuple[int, int]]:
    """(representative index, how many) of the first, interior and last of ``trips`` in a row."""
    if trips <= 2:
        return [(i, 1) for i in range(trips)]
    return [(0, 1), (1, trips - 2), (trips - 1, 1)]


def _at(grid_loop: tuple, i: int) -> tuple[str, int, int]:
    dim, _, tile, extent = grid_loop
    return dim, i * tile, min(tile, extent - i * tile)


def _box(parts) -> dict[str, tuple[int, int]]:
    return {d: (start, size) for d, start, size in parts}


def _split(op: Operator, tensor: str, grid: list) -> dict[str, list[tuple[int, int]]]:
    """Per loop of ``grid`` the tensor's accesses name, its classes of tiles: first, interior and
    last, or every tile where interior tiles probed along it (the whole extent of every other
    dimension) touch unlike counts of the tensor, alone or with the next tile."""
    from loopwise.memory.polyhedral import footprint_isl as footprint, overlap

    out = {}
    for g in grid:
        dim, trips = g[0], g[1]
        if trips >= 4:
            picks = sorted({1, 2, trips // 2, trips - 3, trips - 2} & set(range(1, trips - 1)))
            alone = {footprint(op, tensor, _box([_at(g, i)])) for i in picks}
            pairs = {overlap(op, tensor, _box([_at(g, i)]), _box([_at(g, i + 1)])) for i in picks if i < trips - 2}
            if len(alone) > 1 or len(pairs) > 1:
                out[dim] = [(i, 1) for i in range(trips)]
                continue
        out[dim] = _classes(trips)
    return out


def _combos(classes: list[list[tuple[int, int]]]):
    """Every choice of one class per loop: (the representative indices, how many tiles)."""
    combos = [((), 1)]
    for options in classes:
        combos = [(reps + (i,), n * m) for reps, n in combos for i, m in options]
    return combos


def _tiles_sum(op: Operator, tensor: str, grid: list) -> tuple[int, int]:
    """Over every tile of ``grid``: the sum of what each touches of ``tensor``, and the most one does."""
    from loopwise.memory.polyhedral import footprint_isl as footprint

    named = _named(op, tensor)
    mine = [g for g in grid if g[0] in named]
    other = math.prod(g[1] for g in grid if g[0] not in named)
    split = _split(op, tensor, mine)
    total, most = 0, 0
    for reps, n in _combos([split[g[0]] for g in mine]):
        c = footprint(op, tensor, _box(_at(g, i) for g, i in zip(mine, reps)))
        total, most = total + n * c, max(most, c)
    return total * other, most


def _moved(op: Operator, tensor: str, grid: list) -> tuple[int, int, int]:
    """(F, U, the most one tile touches) of ``tensor`` (see the module's docstring)."""
    from loopwise.memory.polyhedral import footprint_isl as footprint, overlap

    total, most = _tiles_sum(op, tensor, grid)
    named = _named(op, tensor)
    split = _split(op, tensor, [g for g in grid if g[0] in named])
    kept = 0
    for j, g in enumerate(grid):
        outer = [h for h in grid[:j] if h[0] in named]
        inner = [h for h in grid[j + 1:] if h[0] in named]
        factor = math.prod(h[1] for h in grid[:j] if h[0] not in named)
        if g[0] not in named:
            factor *= g[1] - 1
            steps = [(None, 1)]
        else:  # the pairs (a, a + 1) of tiles in a row along g: first, interior and last pairs
            steps = [(a, 1) for a in range(g[1] - 1)] if len(split[g[0]]) == g[1] else _classes(g[1] - 1)
        for reps, n in _combos([split[h[0]] for h in outer] + [steps]):
            same = [_at(h, i) for h, i in zip(outer, reps)]
            a = reps[-1]
            before = same + ([_at(g, a)] if a is not None else []) + [_at(h, h[1] - 1) for h in inner]
            after = same + ([_at(g, a + 1)] if a is not None else []) + [_at(h, 0) for h in inner]
            kept += factor * n * overlap(op, tensor, _box(before), _box(after))
    return total - kept, footprint(op, tensor, {}), most


def _listed(group: dict) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for d in group.get("dma", []):
        key = (d["tensor"], "load" if d["to"] == "scratchpad" else "store")
        out[key] = out.get(key, 0) + int(d["bytes"])
    return out


def _traffic(op: Operator, group: dict, counts: dict, never: set[str], where: str) -> list[Violation]:
    """Each tensor's listed loads and stores against the graph's count."""
    size = {t.name: t.elem_bytes for t in op.tensors}
    written = {a.tensor for a in op.writes}
    freed = {e[0] for s in group.get("steps", []) for e in s.get("free", [])}
    want: dict[tuple[str, str], int] = {}
    for t, (moved, whole, _) in counts.items():
        if t in written:
            want[(t, "load")] = (moved - whole) * size[t]
            want[(t, "store")] = moved * size[t] if t in freed else 0  # one carried to the next group stays
        else:
            want[(t, "load")] = moved * size[t]
    listed = _listed(group)
    out = []
    for (t, how), nbytes in sorted(listed.items()):
        if t in never or (t, how) not in want:
            out.append(Violation("tile_traffic", where, f"{t}: {nbytes} bytes {_DONE[how]}, which {op.name} run tile "
                                                        f"by tile never {how}s (the model's graph)", 0, nbytes))
    for (t, how), nbytes in sorted(want.items()):
        if listed.get((t, how), 0) != nbytes:
            out.append(Violation("tile_traffic", where, f"{t}: {listed.get((t, how), 0)} bytes {_DONE[how]}, {op.name} "
                                                        f"run tile by tile in the listed order {how}s {nbytes} "
                                                        "(the model's graph)", nbytes, listed.get((t, how), 0)))
    return out


def _fits(op: Operator, group: dict, counts: dict, streamed: set[str], held: dict, where: str) -> list[Violation]:
    """Each tensor's buffer at the step of the operator that uses it against the most a tile
    touches of it."""
    size = {t.name: t.elem_bytes for t in op.tensors}
    out = []
    for step in group.get("steps", []):
        on_chip = held.get(step.get("id"), {})
        for t in step.get("uses", []):
            if t not in counts or t in streamed:
                continue
            need = counts[t][2] * size[t]
            if need > on_chip.get(t, 0):
                out.append(Violation("tile_fit", f"{where}, operator {step.get('operator')}",
                                     f"{t}: a tile touches {need} bytes of it (the model's graph), its buffer "
                                     f"holds {on_chip.get(t, 0)}", need, on_chip.get(t, 0)))
    return out
