"""Several loops inside one outer slab: where a group in slabs starts a new inner loop.

Within one slab of the outer dimension (one sequence), a group's operators run in inner slabs
(blocks of rows) as long as every tensor the group has touched so far is sliced the same way by
each of them. An operator whose reads need all of what the loop so far made (the attention's
keys, every row of a projection's output, while the projection ran row block by row block)
starts a new inner loop over the same extent: it runs only once every slab of the loop before
has run, so what that loop made is on chip whole for the outer slab. A tensor used in more than
one loop of a group is held at the outer slab's size (*spanning*: it must be sliced by the outer
dimension wherever it is used, or, if read from outside and not, be loaded for each outer slab);
a tensor used in one loop only is sliced as before. With no outer dimension the outer slab is the
whole group, and a spanning tensor is held whole.

The loops follow from the slab choice alone (:func:`segments`): the planner's search, its
accounting and the schedule agree on them without recording them.
"""

from __future__ import annotations

# The most inner loops the search gives one outer slab: a bound on the search, like the longest
# group (a projection's loop and the attention's, with what follows it, are two).
MAX_LOOPS = 2


def agreement(sig: dict[str, int | None], state: dict[str, int], produced: set[str]) -> int | None:
    """How many tensors a dimension whose signature is ``sig`` slices as the current loop does
    (``state``: each tensor's sliced position there, ``produced``: what the loop made); None when
    it slices one of them otherwise, or reads one the loop made without slicing it."""
    agree = 0
    for t, pos in sig.items():
        if t not in state:
            continue
        if pos is not None and pos != state[t]:
            return None
        if pos is None and t in produced:
            return None
        if pos is not None:
            agree += 1
    return agree


def written(op) -> set[str]:
    """The tensors ``op`` writes."""
    return {a.tensor for a in op.writes}


def segments(planner, i: int, spec) -> tuple[int, ...]:
    """The inner loop each operator of the group starting at ``i`` runs in under ``spec`` (per
    operator: outer dimension or None, inner dimension), numbered from 0 in order. The search
    grows a group one operator at a time, so the loops of the spec one shorter are extended (kept
    for the groups starting at ``i`` only)."""
    key = tuple(spec)
    cache = getattr(planner, "_loops", None)
    if cache is None or cache[0] != i:
        cache = planner._loops = (i, {})
    known = cache[1]
    if key in known:
        return known[key][0]
    prefix = known.get(key[:-1]) if len(key) > 1 else None
    if prefix is None:
        start, segs, state, produced = 0, (), {}, set()
    else:
        start, (segs, state, produced) = len(key) - 1, prefix
        state, produced = dict(state), set(produced)
    for k in range(start, len(key)):
        sig = planner.sigs[i + k][key[k][1]]
        seg = segs[-1] if segs else 0
        if k and agreement(sig, state, produced) is None:
            seg, state, produced = seg + 1, {}, set()
        segs += (seg,)
        for t, pos in sig.items():
            if pos is not None:
                state.setdefault(t, pos)
        produced |= written(planner.ops[i + k])
    known[key] = (segs, state, produced)
    return segs


def bounds(segs: tuple[int, ...], start: int) -> dict[int, tuple[int, int]]:
    """Each loop's first and last operator (positions in the graph; ``start``: the group's first)."""
    out: dict[int, tuple[int, int]] = {}
    for k, s in enumerate(segs):
        first, _ = out.get(s, (start + k, start + k))
        out[s] = (first, start + k)
    return out


def fresh_dims(planner, k: int, extent: int) -> list[str]:
    """Dimensions of operator ``k`` of ``extent`` that can start a new inner loop, the one that
    indexes its written tensor in the earliest position first (the rows before the columns)."""
    op = planner.ops[k]
    out = op.writes[0].tensor
    options = [(sig[out], d) for d, sig in planner.sigs[k].items() if op.dims[d] == extent and sig.get(out) is not None]
    return [d for _, d in sorted(options)]
