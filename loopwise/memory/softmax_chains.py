"""Attention's softmax chains, found from the operators' kinds: the chain that a flash-style plan
may run key block by key block with an online softmax.

The access relations do not say what a coupled row operation computes (a softmax and a layer norm
are both "an output element depends on the whole row"). Only a softmax can be computed key block
by key block, keeping per query row a running maximum and a running sum and rescaling what was
summed so far when the maximum grows. So a chain is recognised from the kinds the importers give
their operators (``kind:node``, :func:`operator_kind`), in this shape:

    scores = matmul(Q, K)      the key dimension: the last of what it writes, not a reduction
    [scaled = mul or div of scores alone]
    [masked = add of scaled and a tensor made outside the chain (the causal mask)]
    probs = softmax(row)        its coupled dimension: the last, the key dimension
    out = matmul(probs, V)      reading the key dimension as its reduction

with every tensor inside the chain read by the next operator alone (a block of scores that
another operator also read would have to exist whole).
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Operator

_SCALES = ("mul", "div")


@dataclass(frozen=True)
class SoftmaxChain:
    """One recognised chain: its operators in order, and the names of its score product, its
    softmax and its value product."""

    operators: tuple[str, ...]
    scores: str
    softmax: str
    mix: str


def operator_kind(op: Operator) -> str:
    """The kind an importer gives ``op`` (``matmul:node`` is a matmul, ONNX ``Softmax:n`` a
    softmax, torch's ``_softmax:n`` too), lower case; "" when its name carries none."""
    return name_kind(op.name)


def name_kind(name: str) -> str:
    """:func:`operator_kind` from an operator's name alone (as a plan's JSON lists it)."""
    head, sep, _ = name.partition(":")
    return head.lstrip("_").lower() if sep else ""


def softmax_chains(graph: Graph) -> list[SoftmaxChain]:
    """Every chain of ``graph`` of the shape the module describes, in graph order."""
    ops = graph.operators
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for k, op in enumerate(ops):
        for a in op.writes:
            producer.setdefault(a.tensor, k)
        for t in {a.tensor for a in op.reads}:
            readers.setdefault(t, []).append(k)
    found = []
    for k, op in enumerate(ops):
        if operator_kind(op) != "softmax":
            continue
        chain = _chain_at(ops, k, producer, readers)
        if chain is not None:
            names = tuple(ops[c].name for c in chain)
            found.append(SoftmaxChain(names, names[0], op.name, names[-1]))
    return found


def _only_output(op: Operator) -> str | None:
    return op.writes[0].tensor if len(op.writes) == 1 else None


def _chain_at(ops, k: int, producer: dict, readers: dict) -> list[int] | None:
    """The chain around the softmax at position k, as positions; None when it has not the shape."""
    soft = ops[k]
    if _row_dim(soft) is None or len({a.tensor for a in soft.reads}) != 1:
        return None
    chain, src = [k], soft.reads[0].tensor
    for kinds, extra in ((("add",), 1), (_SCALES, 0)):  # walking back: the mask, then the scale
        p = producer.get(src)
        if p is None or readers.get(src) != [chain[0]]:
            return None
        if operator_kind(ops[p]) in kinds:
            src = _elementwise_source(ops[p], src, extra)
            if src is None:
                return None
            chain.insert(0, p)
    p = producer.get(src)
    if p is None or readers.get(src) != [chain[0]] or not _scores(ops[p], src):
        return None
    chain.insert(0, p)
    after = readers.get(soft.writes[0].tensor, [])
    if len(after) != 1 or not _mix(ops[after[0]], soft.writes[0].tensor):
        return None
    return chain + after


def _row_dim(soft: Operator) -> str | None:
    """The softmax's coupled dimension when it is one, the last index of what it writes."""
    out = soft.writes[0] if len(soft.writes) == 1 else None
    if out is None or len(soft.coupled) != 1 or out.index[-1] not in soft.coupled:
        return None
    return out.index[-1]


def _elementwise_source(op: Operator, out: str, extra: int) -> str | None:
    """The tensor ``op`` (writing ``out``) reads element by element at ``out``'s index, when it
    reads that one and at most ``extra`` more tensors (a mask), none of them ``out``."""
    if _only_output(op) != out:
        return None
    index = op.writes[0].index
    same = {a.tensor for a in op.reads if a.index == index and op.tensor(a.tensor).shape == op.tensor(out).shape}
    others = {a.tensor for a in op.reads} - same
    if len(same) != 1 or len(others) > extra or out in same | others:
        return None
    return same.pop()


def _scores(op: Operator, out: str) -> bool:
    """A matmul writing ``out`` whose last index is a plain loop dimension it does not reduce."""
    if operator_kind(op) != "matmul" or _only_output(op) != out:
        return False
    key = op.writes[0].index[-1]
    return key in op.dims and op.dims[key] > 1


def _mix(op: Operator, probs: str) -> bool:
    """A matmul reading ``probs`` with its last index as the reduction (in no index it writes)."""
    if operator_kind(op) != "matmul":
        return False
    reads = [a for a in op.reads if a.tensor == probs]
    if len(reads) != 1:
        return False
    key = reads[0].index[-1]
    return key in op.dims and all(key not in " ".join(w.index).split() for w in op.writes)
