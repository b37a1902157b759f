"""A plan's schedule: what the planner decided, written out step by step so that an independent
replay (:mod:`loopwise.memory.verify`, whose docstring defines the format) can check it.

Per group, the steps are its operators in order; a group run in slabs wraps them in a loop over
the inner slab dimension (label ``slab``; several such loops one after the other when its
operators run in several, each with the transfers before and after it), inside a loop over the
outer one (label ``outer``) when it has two levels. Each operator's step lists the buffers it
allocates, the loads and stores it makes and the buffers it frees, following the group's
decisions:

- a tensor the group loads or produces is allocated at its first operator in the group and freed
  after its last one, at its slab's share when the slab dimensions index it; an input is loaded
  at its first reader (its footprint over the group's readers), a produced tensor that a later
  group or the model's output needs is stored by its producer;
- an invariant kept for every slab is loaded before the loop (before the inner loop, at its outer
  slab's share, when the outer dimension indexes it) and freed after it; a streamed invariant is
  loaded by every slab at its first reader;
- a tensor used in several inner loops is held for the outer slab: loaded before its first loop
  (or allocated slab by slab by its producer) and freed after its last; every operator lists what
  it reads (``needs``), so the replay checks a later loop finds all of it on chip;
- a tensor carried in from the group before is on chip already; it is freed after its last reader
  (after the loop, in slabs: later slabs still read it), or in slabs part by part, the part of a
  slab after the last reader of that slab, where the tensor carried out is written over it
  (:mod:`loopwise.memory.handed`); a tensor carried out to the group after is allocated slab by
  slab by its producer and never freed here, so its parts accumulate;
- an operator run alone with a tiling is one step: its tile's buffers (the largest tile), and the
  loads and stores of every tile added up (:func:`loopwise.memory.tiling.traffic`).

A group that runs an attention's softmax chain in key blocks has a ``key`` loop inside its slab
loop, with the online softmax's running state allocated before it and the output stored after it
(:mod:`loopwise.memory.key_schedule`).

Each group also carries its loop nest (``loop_nest``): how it runs (``whole``, ``slabs`` or
``tiled``), the loops it shares across its operators, outermost first (a slab loop names its
dimension in every operator, its extent, its size per iteration and its trip count; a key loop
comes last, and the online softmax's running state is named in ``state``), and per
operator its own loops in order, outermost first, with each dimension's extent, tile size and trip
count, and which of the group's inner loops it runs in when the outer slab holds several
(:mod:`loopwise.memory.segments`: each such loop runs over the inner dimension after the one before
has run all its slabs) (a tiled operator: its tile sizes and the order of its tile loops; an operator run whole: one
tile of every dimension). Finally every buffer gets its offset in the scratchpad and the loads and
stores become the group's DMA list (:mod:`loopwise.memory.placement`).
"""

from __future__ import annotations

from loopwise.memory.epilogue import epilogue_loop_nest
from loopwise.memory.handed import handed_pair
from loopwise.memory.ir import Operator
from loopwise.memory.key_blocks import state_buffers
from loopwise.memory.key_schedule import key_block_steps, key_loop_nest
from loopwise.memory.placement import place
from loopwise.memory.polyhedral import footprint
from loopwise.memory.tiling import tile_counts, tile_footprints, tile_sizes, traffic


def build_schedule(planner, groups) -> dict:
    """The schedule of ``groups`` (a plan of ``planner``'s graph, in order)."""
    out = {"capacity_bytes": int(planner.scratchpad),
           "outputs": [[t, planner.g.nbytes(t)] for t in sorted(planner.outputs)], "groups": []}
    i = 0
    for grp in groups:
        j = i + len(grp.operators)
        ep = (planner.epilogues.get(i) or (None, None))[1] if grp.tiled and len(grp.operators) == 2 else None
        if ep is not None:
            steps = _epilogue_steps(ep)
        elif planner.singles.get(i) is grp or grp.tiled:
            steps = _alone(planner.alone_ops[i], grp, planner.choices.get(i), planner.facts[i])
        elif grp.slab is not None and grp.slab.key_dims:
            steps = key_block_steps(planner, i, j, grp)
        else:
            steps = _group_steps(planner, i, j, grp)
        out["groups"].append({"operators": list(grp.operators), "traffic_bytes": int(grp.traffic_bytes),
                              "peak_bytes": int(grp.peak_bytes), "steps": steps,
                              "loop_nest": epilogue_loop_nest(ep) if ep is not None else loop_nest(
                                  (planner.alone_ops if grp.tiled else planner.ops)[i:j], grp, planner.choices.get(i))})
        i = j
    place(out)
    return out


def _loop(dim: str, extent: int, tile: int) -> dict:
    return {"dim": dim, "extent": int(extent), "tile": int(tile), "trips": -(-int(extent) // int(tile))}


def loop_nest(ops: list[Operator], grp, choice=None) -> dict:
    """The loops of a group of ``ops`` (``choice``: the tiling of an operator run alone)."""
    if grp.tiled and choice is not None:
        op = ops[0]
        sizes = tile_sizes(op, choice.tiles)
        return {"runs": "tiled", "loops": [], "operators": [
            {"operator": op.name, "order": list(choice.order),
             "loops": [_loop(d, op.dims[d], sizes[d]) for d in choice.order]}]}
    slab = grp.slab
    if slab is None:
        return {"runs": "whole", "loops": [], "operators": [
            {"operator": op.name, "order": list(op.dims), "loops": [_loop(d, e, e) for d, e in op.dims.items()]}
            for op in ops]}
    shared = []
    if slab.outer_dims:
        shared.append({"label": "outer", "dims": list(slab.outer_dims), "extent": slab.outer_extent,
                       "size": slab.outer_size, "trips": -(-slab.outer_extent // slab.outer_size)})
    shared.append({"label": "slab", "dims": list(slab.dims), "extent": slab.extent, "size": slab.size,
                   "trips": -(-slab.extent // slab.size)})
    if slab.key_dims:
        shared = key_loop_nest(slab, shared)
    operators = []
    for k, op in enumerate(ops):
        cut = {loop["dims"][k]: loop for loop in shared}
        order = list(cut) + [d for d in op.dims if d not in cut]
        loops = [{**_loop(d, op.dims[d], cut[d]["size"]), "loop": cut[d]["label"]} if d in cut
                 else _loop(d, op.dims[d], op.dims[d]) for d in order]
        operators.append({"operator": op.name, "order": order, "loops": loops,
                          "inner_loop": slab.loops[k] if slab.loops else 0})
    nest = {"runs": "slabs", "loops": shared, "operators": operators}
    if slab.key_dims:
        soft = next(op.name for op in ops if op.coupled)
        nest["state"] = list(state_buffers(soft))  # the online softmax's, per query row
    return nest


def _step(name: str | None, uses=()) -> dict:
    return {"operator": name, "uses": sorted(uses), "needs": [], "alloc": [], "load": [], "store": [], "free": []}


def _alone(op: Operator, grp, choice, facts: dict) -> list[dict]:
    """One operator with its own tiling: every tensor loaded and stored as the tiles move it, but
    an output the group carries out, left on chip whole for the next group
    (:mod:`loopwise.memory.tiled_carry`)."""
    step = _step(op.name, facts)
    if not grp.tiled or choice is None:
        for t, (nbytes, read, written) in facts.items():
            step["alloc"].append([t, nbytes])
            step["store" if written else "load"].append([t, nbytes])
            step["free"].append([t])
        return [step]
    moved = traffic(op, choice.tiles, list(choice.order))
    held = _tile_held(op, choice)
    for t in op.tensors:
        step["alloc"].append([t.name, held[t.name]])
        if moved[t.name].loads:
            step["load"].append([t.name, moved[t.name].loads * t.elem_bytes])
        if t.name in grp.carried_out:  # on chip whole for the next group: neither stored nor freed
            continue
        if moved[t.name].stores:
            step["store"].append([t.name, moved[t.name].stores * t.elem_bytes])
        step["free"].append([t.name])
    return [step]


def _tile_held(op: Operator, choice) -> dict[str, int]:
    """Per tensor, the bytes of its buffer under ``choice``'s tiling: the most any tile holds."""
    sizes, counts = tile_sizes(op, choice.tiles), tile_counts(op, choice.tiles)
    first = {d: (0, s) for d, s in sizes.items()}
    second = {d: (s if counts[d] > 1 else 0, s) for d, s in sizes.items()}
    largest = tile_footprints(op, choice.tiles)
    return {t.name: max(footprint(op, t.name, first), footprint(op, t.name, second), largest[t.name]) * t.elem_bytes
            for t in op.tensors}


def _epilogue_steps(ep) -> list[dict]:
    """A tiled product and its epilogue (:mod:`loopwise.memory.epilogue`). The output tile is the
    result's buffer: the product's step loads its operands' tiles and accumulates into it; the
    epilogue's step loads its other inputs' tiles, turns the tile into the result in place and
    stores it. The loads and stores are those of every tile added up; the epilogue's inputs stream
    through their buffers (:attr:`~loopwise.memory.epilogue.Epilogue.buffers`); the product's
    output as a tensor of its own is never on chip apart from that buffer, nor in DRAM."""
    fused, out = ep.fused, ep.intermediate
    moved, held = ep.moved, _tile_held(fused, ep.choice)
    result = fused.writes[0].tensor
    size = {t.name: t.elem_bytes for t in fused.tensors}
    mine = [t.name for t in ep.product.tensors if t.name != out]
    theirs = [t.name for t in ep.reader.tensors if t.name not in (out, result) and t.name not in mine]
    first, then = _step(ep.product.name, [*mine, result]), _step(ep.reader.name, [*theirs, result])
    for t in [*mine, result]:
        first["alloc"].append([t, held[t]])
        if moved[t].loads:
            first["load"].append([t, moved[t].loads * size[t]])
    first["free"] += [[t] for t in mine]
    then["needs"].append([result, held[result]])
    for t in theirs:
        then["alloc"].append([t, ep.buffers[t]])
        if moved[t].loads:
            then["load"].append([t, moved[t].loads * size[t]])
    then["store"].append([result, moved[result].stores * size[result]])
    then["free"] += [[t] for t in theirs] + [[result]]
    return [first, then]


def _group_steps(planner, i: int, j: int, grp) -> list[dict]:
    """Operators i..j-1 as one group, whole or in slabs, as the planner decided."""
    slab = grp.slab
    spec = None
    if slab is not None:
        spec = [(slab.outer_dims[k] if slab.outer_dims else None, slab.dims[k]) for k in range(j - i)]
    units = planner._units(i, j, spec)
    segs = (slab.loops if slab is not None else ()) or (0,) * (j - i)
    ops = [_step(planner.ops[k].name, planner.facts[k]) for k in range(i, j)]
    pre, post = _step(None), _step(None)
    seg_pre = {s: _step(None) for s in set(segs)}  # before and after each inner loop, in the outer slab
    seg_post = {s: _step(None) for s in set(segs)}
    outer = slab is not None and slab.outer_dims is not None

    def split(t: str, k: int | None = None, by_operator: bool = False) -> list[str]:
        """The loops an entry of ``t`` is split over (at operator k: as that operator slices it;
        ``by_operator``: at both levels)."""
        if slab is None:
            return []
        u = units[t]
        sliced = u.sliced if k is None else planner.sigs[k][slab.dims[k - i]][t] is not None
        by_outer = u.outer if not (outer and by_operator) else planner.sigs[k][slab.outer_dims[k - i]][t] is not None
        return (["outer"] if outer and by_outer else []) + (["slab"] if sliced else [])

    for k in range(i, j):
        for t, (nbytes, read, _) in planner.facts[k].items():
            if read:  # what it reads must be on chip: in a later loop, every slab its producer made
                ops[k - i]["needs"].append([t, nbytes, split(t, k, by_operator=True)])
    pair = handed_pair(planner, i, spec, units, grp.carried_in, grp.carried_out)
    freed = {t: h for t, h in pair.items() if not h.made}
    over = next(((t, *freed) for t, h in pair.items() if h.made), None)
    for t, u in units.items():
        a, z = u.first - i, u.last - i
        last_step = seg_post[segs[z]] if u.spans else ops[z]  # a spanning tensor: after its last loop
        if t in freed:  # slab by slab, as its last reader reads it
            ops[z]["free"].append([t, freed[t].nbytes, split(t, u.last, by_operator=True)])
            continue
        if t in grp.carried_in:
            (ops[z] if slab is None else post)["free"].append([t])
            continue
        if over is not None and t == over[0]:
            ops[a]["over"] = {t: over[1]}  # its buffer lies where the one it is written over was
        if u.produced:
            made = split(t, u.first)
            ops[a]["alloc"].append([t, u.whole, made])
            if t in planner.outputs or (t not in grp.carried_out and planner.uses[t][-1] >= j):
                ops[a]["store"].append([t, planner.facts[u.first][t][0], made])
            if t not in grp.carried_out:
                last_step["free"].append([t])
            continue
        readers = planner._readers_in(t, u.first, u.last)
        loaded = planner.read_union(t, readers) if readers else u.whole
        if slab is not None and not u.sliced and (t in slab.resident or u.spans):
            if t in slab.resident:
                before, after = (seg_pre[segs[a]], seg_post[segs[z]]) if "outer" in split(t) else (pre, post)
            else:
                before, after = seg_pre[segs[a]], seg_post[segs[z]]  # loaded again by every outer slab
            before["alloc"].append([t, u.whole, split(t)])
            before["load"].append([t, loaded, split(t)])
            after["free"].append([t])
            continue
        ops[a]["alloc"].append([t, u.whole, split(t)])
        ops[a]["load"].append([t, loaded, split(t)])
        ops[z]["free"].append([t])
    if slab is None:
        return ops
    body: list[dict] = []
    for s in sorted(set(segs)):
        inner = [step for step, at in zip(ops, segs) if at == s]
        body += [step for step in (seg_pre[s],) if _moves(step)]
        body.append({"loop": "slab", "extent": slab.extent, "size": slab.size, "steps": inner})
        body += [step for step in (seg_post[s],) if _moves(step)]
    if outer:
        body = [{"loop": "outer", "extent": slab.outer_extent, "size": slab.outer_size, "steps": body}]
    return [s for s in (pre,) if _moves(s)] + body + [s for s in (post,) if _moves(s)]


def _moves(step: dict) -> bool:
    return any(step[k] for k in ("alloc", "load", "store", "free"))
