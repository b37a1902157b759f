"""A chain of groups in slabs stops growing when even its smallest slabs, every invariant
streamed, do not fit (``_Planner._hopeless``): checked against the bytes held at each operator
summed tensor by tensor, for every group the search of a block asks about."""

from __future__ import annotations

from loopwise.memory.planner import _Planner

from .test_nested_slabs import CAPACITY, _gpt2_block


def _held_at_most(units, i: int, j: int, extent: int, outer_extent: int) -> float:
    held = [0.0] * (j - i)
    for u in units.values():
        size = u.whole / (extent if u.sliced else 1) / (outer_extent if u.outer else 1)
        a, z = u.held
        for k in range(a - i, z - i + 1):
            held[k] += size
    return max(held)


def test_hopeless_when_the_smallest_slabs_do_not_fit():
    asked = []
    planner = _Planner(_gpt2_block(), CAPACITY, 512)
    hopeless = planner._hopeless

    def recording(i, j, units, extent, outer_extent):
        got = hopeless(i, j, units, extent, outer_extent)
        asked.append((got, _held_at_most(units, i, j, extent, outer_extent)))
        return got

    planner._hopeless = recording
    planner.run()
    assert {got for got, _ in asked} == {True, False}, "the search asks about groups that fit and groups that do not"
    for got, most in asked:
        if abs(most - CAPACITY) > 1e-6 * CAPACITY:  # sums in another order may differ in the last bits
            assert got == (most > CAPACITY)
