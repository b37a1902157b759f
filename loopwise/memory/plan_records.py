"""The records of a whole-model plan: how a group runs in slabs, a group of consecutive
operators, and the plan (:mod:`loopwise.memory.planner` makes them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Slab:
    """How a group runs in slabs: ``size`` units of a dimension of extent ``extent`` per slab, and,
    when ``outer_dims`` is set, those slabs inside slabs of ``outer_size`` units of a second
    dimension (one sequence at a time, then a block of its query rows); when ``key_dims`` is set,
    each slab runs an attention's softmax chain in blocks of ``key_size`` keys inside it
    (:mod:`loopwise.memory.key_blocks`)."""

    dims: tuple[str, ...]  # the loop dimension that carries slabs, per operator of the group
    extent: int
    size: int
    resident: tuple[str, ...]  # invariants kept for every slab
    streamed: tuple[str, ...]  # invariants loaded again by every slab
    outer_dims: tuple[str, ...] | None = None
    outer_extent: int = 1
    outer_size: int = 1
    loops: tuple[int, ...] = ()  # the inner loop of each operator, when there are several in an outer slab
    key_dims: tuple[str, ...] | None = None  # per operator: the key dimension of an attention run in key blocks
    key_extent: int = 1
    key_size: int = 1
    batch_dims: tuple[str, ...] | None = None  # per operator: a second outer loop, outside the first (key blocks)
    batch_extent: int = 1
    batch_size: int = 1

    @property
    def count(self) -> int:
        return (math.ceil(self.extent / self.size) * math.ceil(self.outer_extent / self.outer_size)
                * math.ceil(self.batch_extent / self.batch_size))

    def describe(self) -> str:
        """``32 slabs of 1/32 of n``, or with an outer level ``... within 1/32 of l0``."""
        inner = f"{self.size}/{self.extent} of {self.dims[0]}"
        if self.loops:
            inner += f" in {self.loops[-1] + 1} loops"
        if self.key_dims:
            inner += f", key blocks of {self.key_size}/{self.key_extent} of {self.key_dims[0]}"
        if self.batch_dims:
            inner += f" within {self.outer_size}/{self.outer_extent} of {self.outer_dims[0]}"
            return f"{self.count} slabs: {inner} within {self.batch_size}/{self.batch_extent} of {self.batch_dims[0]}"
        if self.outer_dims:
            return f"{self.count} slabs: {inner} within {self.outer_size}/{self.outer_extent} of {self.outer_dims[0]}"
        return f"{self.count} slabs of {inner}"


@dataclass(frozen=True)
class Group:
    operators: tuple[str, ...]
    traffic_bytes: int
    peak_bytes: int  # the scratchpad it needs (for a tiled singleton: its tile's buffers)
    resident: tuple[str, ...]  # intermediates that never touch DRAM
    tiled: bool = False
    slab: Slab | None = None
    occupancy: tuple[int, ...] = ()  # scratchpad bytes held at each of its operators
    per_operator: tuple[int, ...] = ()  # its traffic by operator (a load at the first reader, a store at the producer)
    carried_in: tuple[str, ...] = ()  # kept on chip by the group before, not loaded
    carried_out: tuple[str, ...] = ()  # kept on chip for the group after, not stored


@dataclass(frozen=True)
class Plan:
    groups: tuple[Group, ...]
    total_bytes: int
    compulsory_bytes: int
    layer_by_layer_bytes: int
    pairs_removed: int  # store -> load pairs through DRAM the grouping removes
    evaluated: int = field(default=0, compare=False)
    layer_by_layer: tuple[int, ...] = field(default=(), compare=False)  # each operator alone, its best tiling
    schedule: dict | None = field(default=None, compare=False)  # step by step (:mod:`loopwise.memory.schedule`)
    planned_capacity_bytes: int = field(default=0, compare=False)  # set when planned for less than the scratchpad
    touched: tuple[int, ...] = field(default=(), compare=False)  # bytes each operator reads and writes, once each
