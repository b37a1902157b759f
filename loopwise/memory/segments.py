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
    return {a.tensor for a in op.writes}


def segments(planner, i: int, spec) -> tuple[int, ...]:
    """The inner loop each operator of the group starting at ``i`` runs in under ``spec`` (per
    operator: outer dimension or None, inner dimension), numbered from 0 in order."""
    out: list[int] = []
    state: dict[str, int] = {}
    produced: set[str] = set()
    seg = 0
    for k, (_, inner) in enumerate(spec):
        sig = planner.sigs[i + k][inner]
        if k and agreement(sig, state, produced) is None:
            seg, state, produced = seg + 1, {}, set()
        out.append(seg)
        for t, pos in sig.items():
            if pos is not None:
                state.setdefault(t, pos)
        produced |= written(planner.ops[i + k])
    return tuple(out)


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
