"""A residual stream handed on chip from one slab loop to the next, freed slab by slab as each
block reads it and written over by the block's output: one block's weight and one residual fit
the scratchpad, but not two residuals, nor every weight, so only the slab-by-slab handover keeps
the stream off DRAM."""

from __future__ import annotations

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise
from loopwise.memory.planner import _Planner, plan
from loopwise.memory.verify import describe, verify

ROWS, WIDTH = 64, 32
STREAM, WEIGHT = ROWS * WIDTH * 2, WIDTH * WIDTH * 2  # 4 KiB, 2 KiB


def _blocks(count: int = 4) -> Graph:
    """x_{b+1} = x_b + x_b @ w_b, ``count`` times; the rows carry slabs."""
    ops = []
    for b in range(count):
        x, w, h, y = f"x{b}", f"w{b}", f"h{b}", f"x{b + 1}"
        ops.append(Operator(f"proj{b}", {"m": ROWS, "n": WIDTH, "k": WIDTH},
                            (Tensor(x, (ROWS, WIDTH)), Tensor(w, (WIDTH, WIDTH)), Tensor(h, (ROWS, WIDTH))),
                            reads=(Access(x, ("m", "k")), Access(w, ("k", "n"))), writes=(Access(h, ("m", "n")),),
                            macs=ROWS * WIDTH * WIDTH))
        ops.append(elementwise(f"add{b}", (ROWS, WIDTH), (x, h), y))
    return Graph("residual-blocks", tuple(ops), frozenset(f"w{b}" for b in range(count)))


def test_the_stream_stays_on_chip_block_to_block_and_the_replay_passes():
    capacity = STREAM + WEIGHT + 1024  # one residual and one weight, and room for slabs
    p = plan(_blocks(), capacity_bytes=capacity)
    assert p.total_bytes == p.compulsory_bytes  # the weights, x0 and the output once each
    assert [g.carried_in for g in p.groups] == [(), ("x1",), ("x2",), ("x3",)]
    assert all(g.slab is not None and g.peak_bytes <= capacity for g in p.groups)
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, "\n".join(describe(verdict))
    assert verdict.traffic_bytes == p.total_bytes and verdict.peak_bytes <= capacity
    # the handover is what fits: the residual carried in and the one carried out held whole do not,
    # nor the four weights
    assert 2 * STREAM > capacity and 4 * WEIGHT > capacity


def test_a_block_holds_one_residual_and_a_slab_not_two_residuals():
    planner = _Planner(_blocks(), 1 << 20, 16)
    spec = [(None, "m"), (None, "d0")]
    grp = planner.evaluate(2, 4, spec, ROWS, carry_in=True, carry_out=True)
    assert grp is not None and grp.carried_in == ("x1",) and grp.carried_out == ("x2",)
    assert grp.traffic_bytes == WEIGHT
    slab = grp.slab.size * WIDTH * 2  # one slab of the residual (and of h)
    # at the add of slab k: x1's slabs k.. and x2's slabs ..k (one slab twice), w1, h1's slab
    assert grp.peak_bytes == STREAM + slab + WEIGHT + slab


def test_a_scratchpad_without_room_for_a_residual_beside_a_weight_sends_the_stream_through_dram():
    p = plan(_blocks(), capacity_bytes=STREAM + WEIGHT)  # a slab of the output beside it does not fit
    assert p.total_bytes > p.compulsory_bytes
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, "\n".join(describe(verdict))
