"""The planner tallies a group grown by one operator by bringing the tally of the group one
shorter up to date (:func:`loopwise.memory.group_tally.tally`). Every tally it makes must equal
the tally of the same group made from scratch, and must not change once given out."""

from __future__ import annotations

from loopwise.memory import planner as planner_module
from loopwise.memory.group_tally import tally
from loopwise.memory.planner import _Planner

from .test_nested_slabs import CAPACITY, _gpt2_block

ROOMY = 64 * CAPACITY


def _snapshot(got):
    return (got.moved, got.outer_moved, got.charged.tolist(), got.outer_charged.tolist(),
            {k: h.tolist() for k, h in got.held.items()}, list(got.invariants), list(got.resident), dict(got.own),
            got.loaded_once, sum(v[1] for v in got.invariants))


def _record(monkeypatch):
    seen = []

    def recording(planner, i, j, spec, units):
        got = tally(planner, i, j, spec, units)
        seen.append((i, j, None if spec is None else list(spec), units, got, _snapshot(got)))
        return got

    monkeypatch.setattr(planner_module, "tally", recording)
    return seen


def test_tallies_brought_up_to_date_equal_tallies_made_from_scratch(monkeypatch):
    g = _gpt2_block()
    seen = _record(monkeypatch)
    _Planner(g, CAPACITY, 512).run()
    grown = [s for s in seen if s[1] - s[0] > 2 and s[2] is not None and any(u.spans for u in s[3].values())]
    assert grown, "the block's search tallies long groups with several inner loops"
    small = len(seen)
    _Planner(g, ROOMY, 512).run()
    assert any(s[2] is None and s[1] - s[0] > 2 for s in seen[small:]), "and, with room, long groups run whole"
    for n, (i, j, spec, units, got, at_the_time) in enumerate(seen):
        assert _snapshot(got) == at_the_time, f"the tally of group {i}..{j} changed after it was given out"
        assert at_the_time[-2] == at_the_time[-1], f"group {i}..{j}: the invariants' loads"
        fresh = tally(_Planner(g, CAPACITY if n < small else ROOMY, 512), i, j, spec, units)
        assert _snapshot(fresh) == at_the_time, f"group {i}..{j} {spec}"


def test_a_tally_out_of_order_is_made_from_scratch(monkeypatch):
    """Tallies asked for in another order than the search's (shorter after longer, another slab
    choice in between) equal those made from scratch."""
    g = _gpt2_block()
    seen = _record(monkeypatch)
    _Planner(g, CAPACITY, 512).run()
    asked = _Planner(g, CAPACITY, 512)
    for i, j, spec, units, _, at_the_time in reversed(seen[::7]):
        assert _snapshot(tally(asked, i, j, spec, units)) == at_the_time, f"group {i}..{j} {spec}"
