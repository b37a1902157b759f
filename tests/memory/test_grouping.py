"""The grouping's shortcuts change nothing: a group in slabs left unsized because it cannot beat
what is already found gives the same plan as sizing every group."""

from __future__ import annotations

import pytest

from loopwise.memory.planner import _Planner, plan

from .test_attention_slabs import _heads_attention
from .test_planner import _batched_chain, _keys_scores_softmax


def _sizing_every_group(monkeypatch) -> None:
    evaluate = _Planner.evaluate

    def every(self, *args, beat=None, **kwargs):
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(_Planner, "evaluate", every)


# the tightest, one between and the roomiest in the fast tier; the rest (about 4-8 s each) slow
@pytest.mark.parametrize("capacity_kib", [4, 20, 3000] + [pytest.param(k, marks=pytest.mark.slow)
                                                       for k in (8, 12, 48, 700)])
def test_the_plan_is_the_one_sizing_every_group_gives(monkeypatch, capacity_kib):
    graphs = (_batched_chain(4), _keys_scores_softmax(), _heads_attention())
    quick = [plan(g, capacity_kib * 1024) for g in graphs]
    _sizing_every_group(monkeypatch)
    full = [plan(g, capacity_kib * 1024) for g in graphs]
    for a, b in zip(quick, full):
        assert a.total_bytes == b.total_bytes
        assert a.groups == b.groups and a.schedule == b.schedule
