"""The schedule of a group run in key blocks (:mod:`loopwise.memory.key_blocks`): its outer loops
(none, one or two) around the loop over query blocks (``slab``), whose body is a step before the
key loop (the queries loaded, the output block and the online softmax's running maximum and sum
allocated), the ``key`` loop (per key block: the keys, values and mask blocks loaded at their first
reader and freed after their last, the scores and probabilities made and used on chip) and a step
after it (the output block stored, everything freed)."""

from __future__ import annotations

from loopwise.memory.key_blocks import BATCH, BEFORE, KEY, OUTER, SLAB, key_loops, outer_positions, slab_sizes


def _step(name: str | None, uses=()) -> dict:
    return {"operator": name, "uses": sorted(uses), "needs": [], "alloc": [], "load": [], "store": [], "free": []}


def loops_of(planner, i: int, j: int, grp):
    """The :class:`loopwise.memory.key_blocks.KeyLoops` that ``grp`` (chain i..j-1) was sized with."""
    slab = grp.slab
    for positions in outer_positions(planner.ops[i:j]):
        loops = key_loops(planner, i, j, positions)
        if loops is not None and (loops.dims(BATCH), loops.dims(OUTER), loops.dims(SLAB)) == (
                slab.batch_dims, slab.outer_dims, slab.dims):
            return loops
    raise ValueError(f"group {grp.operators[0]}..: no key loops match its slabs")


def key_block_steps(planner, i: int, j: int, grp) -> list[dict]:
    """The steps of ``grp``, the chain of operators i..j-1 run in key blocks."""
    loops = loops_of(planner, i, j, grp)
    sizes = slab_sizes(grp.slab)
    ops = [_step(planner.ops[k].name, planner.facts[k]) for k in range(i, j)]
    before, after = _step(None), _step(None)
    for h in loops.held:
        entry = [h.tensor, h.nbytes, list(h.labels)]
        if h.first == BEFORE:
            before["alloc"].append(entry)
            if h.role == "load":
                before["load"].append(entry)
            if h.role == "store":
                after["store"].append(entry)
            after["free"].append([h.tensor])
            continue
        ops[h.first]["alloc"].append(entry)
        if h.role == "load":
            ops[h.first]["load"].append(entry)
        ops[h.last]["free"].append([h.tensor])
    body = [before, _loop(KEY, sizes, ops), after]
    for label in reversed([label for label in sizes if label != KEY]):
        body = [_loop(label, sizes, body)]
    return body


def _loop(label: str, sizes: dict, steps: list) -> dict:
    size, extent = sizes[label]
    return {"loop": label, "extent": extent, "size": size, "steps": steps}


def key_loop_nest(slab, loops: list[dict]) -> list[dict]:
    """``loops`` (a group's shared loops, outermost first) with its second outer loop first and
    its key loop last."""
    batch = [_shared(BATCH, slab.batch_dims, slab.batch_extent, slab.batch_size)] if slab.batch_dims else []
    return batch + loops + [_shared(KEY, slab.key_dims, slab.key_extent, slab.key_size)]


def _shared(label: str, dims, extent: int, size: int) -> dict:
    return {"label": label, "dims": list(dims), "extent": extent, "size": size, "trips": -(-extent // size)}
