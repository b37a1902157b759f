"""A plan of a test graph that the independent replay accepts, with its traffic recounted equal."""

from __future__ import annotations

from loopwise.memory.graph import Graph
from loopwise.memory.planner import plan
from loopwise.memory.verify import describe, verify


def verified_plan(g: Graph, capacity: int):
    """``plan(g)`` at ``capacity`` bytes, after checking that ``memory verify``'s replay passes it,
    recounts its traffic and finds its peak within the capacity."""
    p = plan(g, capacity_bytes=capacity)
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, "\n".join(describe(verdict))
    assert verdict.traffic_bytes == p.total_bytes and verdict.peak_bytes <= capacity
    return p
