"""What an importer hands back: the model's graph, with what it folded, could not model or
generated."""

from __future__ import annotations

from dataclasses import dataclass, field

from loopwise.memory.graph import Graph

UNSUPPORTED = "unsupported (no model: counted at least at all their inputs and outputs, each whole)"


@dataclass
class Imported:
    graph: Graph
    names: dict[str, str] = field(default_factory=dict)  # the graph's tensor names -> the model's own
    folded: list[str] = field(default_factory=list)  # copy operators folded away, by op type
    unsupported: dict[str, int] = field(default_factory=dict)  # op type -> count (at all its inputs and outputs)
    generated: list[str] = field(default_factory=list)  # operators computed from no stored tensor (recomputed)
