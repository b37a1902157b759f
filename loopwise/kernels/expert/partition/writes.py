"""In-place writes among a forward's operations: which memory they write, so that no fused pass
reads it on the wrong side of a write, and which nodes dead-code elimination must keep."""

from __future__ import annotations

from loopwise.kernels.expert.functionalize import memory_of, viewed, writes_in_place


# Modules whose output is a fresh tensor (never a view of their input or of a parameter).
_FRESH_OUTPUT = ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Linear",
                 "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "LayerNorm", "InstanceNorm2d")


def private_in_place(gm, node) -> bool:
    """An in-place module or function call (``nn.ReLU(inplace=True)``) whose input is a fresh module
    output read by nothing else: no one can see the write, so computing it out of place is the
    same program (VGG's and ResNet's ReLUs after a convolution or a norm)."""
    if node.op not in ("call_module", "call_function") or not node.args:
        return False
    src = node.args[0]
    return (getattr(src, "op", None) == "call_module" and len(src.users) == 1
            and type(gm.get_submodule(src.target)).__name__ in _FRESH_OUTPUT)


def late_writes(gm) -> dict:
    """{node: the position in the graph of the last in-place write to its memory} for the nodes
    whose memory an operation left in PyTorch writes in place (``x.mul_(0)``, ``x[:, :3].zero_()``,
    ``out=x``, an in-place module anyone else can see), through any view of it, and every view of
    it. A pass launches where its output is and reads its inputs there: an operation that reads such
    a node before its last write cannot be part of a pass (it would read it after the write)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    writes = in_place_writes(gm)
    last: dict = {}
    for n in writes:
        for target in _written_args(gm, n):
            for root in _storage(gm, target):
                last[root] = max(last.get(root, -1), order[n])
    for n in gm.graph.nodes:  # graph order: a view comes after what it views
        bases = viewed(gm, n) or ([n.args[0]] if n in writes and n.args and hasattr(n.args[0], "op") else [])
        if any(b in last for b in bases):
            last[n] = max(last[b] for b in bases if b in last)
    return last


def _writes(gm, node) -> bool:
    return writes_in_place(gm, node) and not private_in_place(gm, node)


def _written_args(gm, node) -> list:
    found = [node.kwargs["out"]] if node.kwargs.get("out") is not None else []
    if node.args and hasattr(node.args[0], "op") and not found:
        found.append(node.args[0])
    return [n for n in found if hasattr(n, "op")]


def _storage(gm, node) -> set:
    """The nodes whose memory ``node`` may be (through views and the writes someone else can see)."""
    return memory_of(gm, node, lambda n: _writes(gm, n))


def in_place_writes(gm) -> set:
    """The nodes that write memory in place that someone else can see (see :func:`late_writes`)."""
    return {n for n in gm.graph.nodes if _writes(gm, n)}


def eliminate_dead_code(gm, writes) -> None:
    """fx's dead-code elimination, keeping the in-place ``writes`` (found before the graph was
    rewritten: fx would drop ``x.mul_(0)`` whose result no one reads, though a later read of x
    sees it)."""
    gm.graph.eliminate_dead_code(is_impure_node=lambda n: n.is_impure() or n in writes)
