"""A plan whose buffers fit the scratchpad by bytes but not by offsets is planned again for less
room; whatever the planner returns places in the scratchpad (the replay passes it)."""

import pytest

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise
from loopwise.memory.planner import plan
from loopwise.memory.verify import describe, verify


def _projection(name, x, w, out, lead, n, k):
    dims = {f"b{i}": e for i, e in enumerate(lead)} | {"n": n, "k": k}
    outer = tuple(f"b{i}" for i in range(len(lead)))
    return Operator(name, dims, (Tensor(x, (*lead, k)), Tensor(w, (n, k)), Tensor(out, (*lead, n))),
                    reads=(Access(x, (*outer, "k")), Access(w, ("n", "k"))), writes=(Access(out, (*outer, "n")),))


def _residual_mlps(b, length, d, f, blocks):
    """``blocks`` of h + down(act(up(h))) over [b, length, d] activations, hidden size f."""
    ops, weights, h = [], set(), "h0"
    for i in range(blocks):
        ops += [_projection(f"up{i}", h, f"wu{i}", f"u{i}", [b, length], f, d),
                elementwise(f"act{i}", (b, length, f), (f"u{i}",), f"a{i}"),
                _projection(f"dn{i}", f"a{i}", f"wd{i}", f"o{i}", [b, length], d, f),
                elementwise(f"res{i}", (b, length, d), (h, f"o{i}"), f"h{i + 1}")]
        weights |= {f"wu{i}", f"wd{i}"}
        h = f"h{i + 1}"
    return Graph("residual", tuple(ops), frozenset(weights))


@pytest.mark.parametrize("sizes,blocks,capacity", [((7, 100, 96, 128), 2, 586752), ((6, 16, 64, 128), 2, 81920),
                                                   ((6, 16, 64, 128), 3, 81920)])
def test_a_plan_that_fits_by_bytes_but_not_by_offsets_is_never_returned(sizes, blocks, capacity):
    p = plan(_residual_mlps(*sizes, blocks), capacity_bytes=capacity)
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, describe(verdict)
