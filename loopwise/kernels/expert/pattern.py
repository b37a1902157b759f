"""The record the expert's capture produces and its templates read: what a problem's forward is."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pattern:
    """What the expert recognized in a problem."""

    kind: str  # "elementwise" | "row_softmax" | "unsupported"
    inputs: int = 0
    expr: str = ""
    ops: tuple[str, ...] = ()
    body: tuple[str, ...] = ()  # one Triton statement per captured operation
    params: tuple[tuple[str, object], ...] = ()  # template parameters (e.g. LayerNorm's shape and eps)
    operands: tuple[str, ...] = ()  # attribute paths of the model's tensors the kernel reads (p0, p1, ...)
    init: str = ""  # ModelNew.__init__ when it must hold those tensors: the reference's own, copied
    constants: tuple[tuple[str, str], ...] = ()  # module-level literals that init reads, as (name, source)
    helpers: str = ""  # the problem's own classes and functions init builds from, copied for the module level
    prologue: str = ""  # attribute path of a module ModelNew calls on input 0 first (a conv in PyTorch / cuDNN)
    scalars: tuple[int, ...] = ()  # positions of inputs that are plain numbers (kernel arguments, not tensors)
    reason: str = ""

