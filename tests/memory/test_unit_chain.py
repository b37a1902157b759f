"""The planner grows a group one operator at a time and extends the tensors it tallied for the
group one shorter (:func:`loopwise.memory.group_tally.units`). Every group it weighs must see the
same tensors as a group tallied from scratch, and a group's tensors must not change once given
out, whatever the search weighs after it."""

from __future__ import annotations

from dataclasses import asdict

from loopwise.memory.group_tally import units
from loopwise.memory.planner import _Planner

from .test_nested_slabs import CAPACITY, _gpt2_block


def _snapshot(found):
    return None if found is None else {t: asdict(u) for t, u in found.items()}


def test_units_grown_operator_by_operator_equal_units_made_from_scratch():
    g = _gpt2_block()
    searched = _Planner(g, CAPACITY, 512)
    seen = []
    ask = searched._units

    def recording(i, j, spec):
        found = ask(i, j, spec)
        seen.append((i, j, None if spec is None else list(spec), found, _snapshot(found)))
        return found

    searched._units = recording
    searched.run()
    several_loops = [s for s in seen if s[2] is not None and s[4] is not None
                     and any(u["spans"] for u in s[4].values())]
    assert several_loops, "the block's search weighs groups with several inner loops"
    for i, j, spec, found, at_the_time in seen:
        assert _snapshot(found) == at_the_time, f"the tensors of group {i}..{j} changed after they were given out"
        fresh = units(_Planner(g, CAPACITY, 512), i, j, spec)
        assert _snapshot(fresh) == at_the_time, f"group {i}..{j} {spec}"
