"""A model as operators joined by tensor names, and the traffic bounds the planner is held to.

``compulsory_bytes``: the whole-model lower bound with an unlimited scratchpad (FACTS.md section 9,
a project definition): every weight, model input and model output crosses DRAM once and no
intermediate does. ``layer_by_layer_floor_bytes``: the least a layer-at-a-time schedule can move,
since it sends every operator's inputs and outputs through DRAM (ZigZag's and Timeloop's model): the
gap between the two is what fusion and residency can win. ``operator_bound_bytes``: per operator,
the larger of its own compulsory traffic and the Hong-Kung term MACs / sqrt(S) words for a
scratchpad of S words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loopwise.memory.ir import Operator, Tensor


@dataclass(frozen=True)
class Graph:
    """Operators in execution order; ``weights`` names the tensors that are parameters."""

    name: str
    operators: tuple[Operator, ...]
    weights: frozenset[str] = field(default_factory=frozenset)
    # the model's outputs where the model says (a returned tensor may also be read by a later operator)
    declared_outputs: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        seen: dict[str, Tensor] = {}
        for op in self.operators:
            for t in op.tensors:
                if t.name in seen and (seen[t.name].shape, seen[t.name].elem_bytes) != (t.shape, t.elem_bytes):
                    raise ValueError(f"tensor {t.name} is {seen[t.name].shape} in one operator and {t.shape} "
                                     f"in {op.name}")
                seen.setdefault(t.name, t)
        unknown = sorted(set(self.weights) - set(seen))
        if unknown:
            raise ValueError(f"weights {', '.join(unknown)} are not tensors of any operator")

    def tensors(self) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for op in self.operators:
            for t in op.tensors:
                out.setdefault(t.name, t)
        return out

    def _written(self) -> set[str]:
        return {a.tensor for op in self.operators for a in op.writes}

    def _read(self) -> set[str]:
        return {a.tensor for op in self.operators for a in op.reads}

    def inputs(self) -> list[str]:
        """Tensors read but produced by no operator, other than weights."""
        return sorted(self._read() - self._written() - set(self.weights))

    def outputs(self) -> list[str]:
        """Tensors the model returns: those declared, and those produced and read by no operator."""
        return sorted((self._written() - self._read()) | (set(self.declared_outputs) & self._written()))

    def intermediates(self) -> list[str]:
        return sorted(self._written() & self._read())

    def nbytes(self, name: str) -> int:
        t = self.tensors()[name]
        return math.prod(t.shape) * t.elem_bytes

    def touched_bytes(self, name: str) -> int:
        """Bytes of ``name`` that any operator touches (a gather reads only some rows of its table)."""
        from loopwise.memory.polyhedral import count, touched

        union = None
        for op in self.operators:
            if any(t.name == name for t in op.tensors):
                part = touched(op, name, {})
                union = part if union is None else union.union(part)
        return 0 if union is None else count(union) * self.tensors()[name].elem_bytes

    def compulsory_bytes(self) -> int:
        """Weights and inputs as far as operators touch them, and outputs, each moved once."""
        return sum(self.touched_bytes(t) for t in (*self.weights, *self.inputs())) + \
            sum(self.nbytes(t) for t in self.outputs())

    def layer_by_layer_floor_bytes(self) -> int:
        return sum(operator_compulsory_bytes(op) for op in self.operators)

    def operator_bound_bytes(self, scratchpad_bytes: int, c: float = 1.0) -> int:
        return sum(operator_bound_bytes(op, scratchpad_bytes, c) for op in self.operators)


def operator_compulsory_bytes(op: Operator) -> int:
    """Every element the operator touches, moved once (exact footprints: a stride-2 1x1 convolution
    reads a quarter of its input)."""
    from loopwise.memory.polyhedral import footprint

    return sum(footprint(op, t.name, {}) * t.elem_bytes for t in op.tensors)


def operator_bound_bytes(op: Operator, scratchpad_bytes: int, c: float = 1.0) -> int:
    """max(compulsory, c * MACs / sqrt(S)) with S and the traffic in elements of the operator's size."""
    if scratchpad_bytes <= 0:
        raise ValueError("the scratchpad must hold at least one byte")
    elem = op.tensors[0].elem_bytes
    hong_kung = c * op.macs / math.sqrt(scratchpad_bytes / elem) * elem if op.macs else 0.0
    return int(max(operator_compulsory_bytes(op), hong_kung))
