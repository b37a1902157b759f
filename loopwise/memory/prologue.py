"""An elementwise operator that only scales or shifts its input by small broadcast tensors, folded
into the products that read its output (a prologue): a norm's ``x * rstd * gamma`` applied to
each operand tile as the product loads it, instead of written out whole and read back.

The operator is folded when it is *a broadcast application*: every loop of it indexes its result
plainly; it reads one tensor of the result's shape at the result's own index (the *main* input, of
the same element size) and at least one other, each at a proper subset of its loops, plainly (a
per-row statistic, a per-column weight; a dimension of one indexed by ``0``); no guard, no
coupled loop. A unary operator (an activation) is not folded here. Its result must have readers, all of
them products (an operator with a loop that does not index what it writes: a reduction), none a
model output. Each reader then reads the main input where it read the result, and every other
input at the composed index; the operator is gone. The bytes a reader's tile holds of the main
input are those it held of the result, and the broadcast inputs add a row or a column: the
statistic is read instead of a stored, normalized copy of the whole input. Chains fold from the
last: ``(x * rstd) * gamma`` becomes a product reading ``x``, ``rstd`` and ``gamma``.
"""

from __future__ import annotations

import re
from dataclasses import replace

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator
from loopwise.memory.layerwise import TilingChoice, best_tiling
from loopwise.memory.tiling import buffer_bytes, traffic_bytes


def _is_product(op: Operator) -> bool:
    written = {e for a in op.writes for e in a.index}
    return any(not any(re.search(rf"\b{re.escape(d)}\b", e) for e in written) for d in op.dims)


def broadcast_main(op: Operator) -> Access | None:
    """The main input of ``op`` when it is a broadcast application, else None."""
    if len(op.writes) != 1 or op.coupled:
        return None
    out = op.writes[0]
    if out.guard or tuple(out.index) != tuple(op.dims) or any(a.guard for a in op.reads):
        return None
    mains = [a for a in op.reads if tuple(a.index) == tuple(out.index)]
    if len(mains) != 1 or op.tensor(mains[0].tensor).elem_bytes != op.tensor(out.tensor).elem_bytes:
        return None
    others = [a for a in op.reads if a is not mains[0]]
    if not others:
        return None  # a unary operator: nothing small to apply
    for a in others:
        loops = [e for e in a.index if e != "0"]  # "0": a dimension of one (a kept reduced dimension)
        if not (set(loops) < set(op.dims) and len(set(loops)) == len(loops)):
            return None
    if len({a.tensor for a in op.reads}) != len(op.reads) or out.tensor in {a.tensor for a in op.reads}:
        return None
    return mains[0]


def _fold_into(app: Operator, reader: Operator) -> Operator:
    """``reader`` reading ``app``'s inputs where it read ``app``'s result."""
    out = app.writes[0].tensor
    (at,) = [a for a in reader.reads if a.tensor == out]
    where = dict(zip(app.dims, at.index))
    composed = tuple(Access(a.tensor, tuple(where.get(d, d) for d in a.index), at.guard) for a in app.reads)
    reads = tuple(r for a in reader.reads for r in (composed if a.tensor == out else (a,)))
    have = {t.name for t in reader.tensors}
    tensors = tuple(t for t in reader.tensors if t.name != out) + tuple(
        t for t in app.tensors if t.name != out and t.name not in have)
    return replace(reader, tensors=tensors, reads=reads)


def fold_prologues(graph: Graph) -> Graph:
    """``graph`` with every broadcast application whose readers are all products folded into
    them; the graph itself when there is none."""
    return folded(graph)[0]


def folded(graph: Graph) -> tuple[Graph, dict[str, tuple[Access, ...]]]:
    """:func:`fold_prologues`, and per reader that took a prologue, the reads of the small
    (broadcast) inputs it took (:func:`prologue_tiling`)."""
    ops = list(graph.operators)
    added: dict[str, tuple[Access, ...]] = {}
    outputs = set(graph.outputs())
    changed = True
    while changed:
        changed = False
        for k in range(len(ops) - 1, -1, -1):
            app = ops[k]
            if broadcast_main(app) is None or app.writes[0].tensor in outputs:
                continue
            out = app.writes[0].tensor
            readers = [j for j, op in enumerate(ops) if any(a.tensor == out for a in op.reads)]
            if not readers or any(not _is_product(ops[j]) or sum(a.tensor == out for a in ops[j].reads) != 1
                                  or any(a.tensor == out for a in ops[j].writes) for j in readers):
                continue
            main = broadcast_main(app).tensor
            for j in readers:
                before = set(ops[j].reads)
                ops[j] = _fold_into(app, ops[j])
                small = tuple(a for a in ops[j].reads if a not in before and a.tensor != main)
                added[ops[j].name] = added.get(ops[j].name, ()) + small
            del ops[k]
            changed = True
    if len(ops) == len(graph.operators):
        return graph, {}
    return replace(graph, operators=tuple(ops), declared_outputs=frozenset(graph.declared_outputs)), added


def prologue_tiling(op: Operator, small: tuple[Access, ...], capacity: int) -> TilingChoice:
    """``op``'s tiling (:func:`~loopwise.memory.layerwise.best_tiling`); for a product that took a
    prologue (``small``: the reads it took, :func:`folded`), first the tiling of the product as it
    was (searched once for every product of its shape), with the exact traffic of ``op`` under it,
    where it still fits."""
    if small:
        reads = tuple(a for a in op.reads if a not in small)
        used = {a.tensor for a in reads + op.writes}
        proxy = best_tiling(replace(op, reads=reads, tensors=tuple(t for t in op.tensors if t.name in used)), capacity)
        if buffer_bytes(op, proxy.tiles) <= capacity:
            return replace(proxy, operator=op.name, traffic_bytes=traffic_bytes(op, proxy.tiles, list(proxy.order)),
                           buffer_bytes=buffer_bytes(op, proxy.tiles))
    return best_tiling(op, capacity)
