"""The whole-model plan: intermediates kept in the scratchpad between consecutive operators, down to
the compulsory bound when everything fits, and never worse than layer by layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwise.memory.planner import plan


def test_with_room_for_everything_the_plan_moves_the_compulsory_traffic(chain):
    p = plan(chain, capacity_bytes=1 << 20)
    assert p.total_bytes == chain.compulsory_bytes() == p.compulsory_bytes
    assert len(p.groups) == 1 and set(p.groups[0].resident) == {"y1", "z1"} and p.pairs_removed == 2
    assert p.layer_by_layer_bytes == chain.layer_by_layer_floor_bytes() > p.total_bytes


def test_the_group_must_fit_at_every_operator(chain):
    y1 = 16 * 32 * 32 * 2
    # conv2 alone needs z1 + y2 + w2; keeping y1 and z1 together across the relu needs 2 * y1
    tight = 2 * y1 + 1024
    p = plan(chain, capacity_bytes=tight)
    assert all(grp.peak_bytes <= tight for grp in p.groups)
    assert p.compulsory_bytes <= p.total_bytes <= p.layer_by_layer_bytes


def test_a_scratchpad_too_small_for_any_fusion_is_layer_by_layer(chain):
    p = plan(chain, capacity_bytes=8 * 1024)
    assert len(p.groups) == 3 and p.pairs_removed == 0 and p.total_bytes == p.layer_by_layer_bytes


def test_resnet18_at_24_mib_reaches_the_compulsory_bound():
    zigzag = pytest.importorskip("zigzag")
    from loopwise.memory.onnx_import import load_onnx

    g = load_onnx(Path(zigzag.__file__).parent / "inputs" / "workload" / "resnet18.onnx").graph
    p = plan(g, capacity_bytes=24 * 2**20)
    assert p.total_bytes <= 1.05 * p.compulsory_bytes and p.total_bytes < 0.6 * p.layer_by_layer_bytes


def _batched_chain(batch: int):
    """conv(3->32) -> relu -> conv(32->32) on 64x64 maps: 256 KiB of intermediate per image."""
    from loopwise.memory.graph import Graph
    from loopwise.memory.ir import conv2d, elementwise

    conv1 = conv2d("conv1", n=batch, c=3, h=64, w=64, k=32, r=3, s=3, pad=1, tensors=("x", "w1", "y1"))
    relu = elementwise("relu", (batch, 32, 64, 64), ("y1",), "z1")
    conv2 = conv2d("conv2", n=batch, c=32, h=64, w=64, k=32, r=3, s=3, pad=1, tensors=("z1", "w2", "y2"))
    return Graph("batched", (conv1, relu, conv2), frozenset({"w1", "w2"}))


def test_slab_dimensions_exclude_halos_reductions_and_coupled_rows():
    from loopwise.memory.ir import Access, Operator, Tensor, conv2d
    from loopwise.memory.slabs import slab_signatures

    conv = conv2d("c", n=4, c=8, h=16, w=16, k=8, r=3, s=3, pad=1)
    sig = slab_signatures(conv)
    assert set(sig) == {"n", "k"}  # p, q reach the input through a halo; c, r, s are reductions (g is 1)
    assert sig["n"] == {"X": 0, "W": None, "Y": 0} and sig["k"] == {"X": None, "W": 0, "Y": 1}
    rows = Operator("softmax", {"r": 8, "j": 16}, (Tensor("a", (8, 16)), Tensor("b", (8, 16))),
                    reads=(Access("a", ("r", "j")),), writes=(Access("b", ("r", "j")),), coupled=frozenset({"j"}))
    assert set(slab_signatures(rows)) == {"r"}


def test_a_batch_too_big_to_run_whole_runs_image_by_image_at_the_compulsory_traffic():
    g = _batched_chain(batch=16)
    capacity = 3 * 2**20  # one image's chain fits (~0.8 MiB), the whole batch (~13 MiB) does not
    p = plan(g, capacity_bytes=capacity)
    (grp,) = p.groups
    assert grp.slab is not None and grp.slab.dims == ("n", "d0", "n") and grp.slab.count > 1
    assert set(grp.slab.resident) == {"w1", "w2"} and grp.peak_bytes <= capacity
    assert p.total_bytes == p.compulsory_bytes == g.compulsory_bytes()
    assert p.total_bytes < p.layer_by_layer_bytes


def test_weights_that_do_not_stay_are_loaded_again_by_every_slab():
    g = _batched_chain(batch=16)
    w2 = 32 * 32 * 9 * 2
    # room for one image's working set but not for the weights of both convolutions besides it
    p = plan(g, capacity_bytes=2 * 2**20 // 3)
    assert p.compulsory_bytes <= p.total_bytes <= p.layer_by_layer_bytes
    for grp in p.groups:
        if grp.slab is not None and grp.slab.streamed:
            assert grp.traffic_bytes >= grp.slab.count * w2 // 2


def test_an_intermediate_read_whole_by_a_later_operator_starts_a_second_loop():
    """Attention's keys: produced row by row, but every query row reads all of them, so the product
    that makes them and the one that reads them cannot share one loop over rows: the reader runs
    in a second loop, after every row block of the keys is made, the keys held whole between."""
    from loopwise.memory.graph import Graph
    from loopwise.memory.ir import matmul
    from loopwise.memory.planner import _Planner

    keys = matmul("keys", m=64, n=32, k=32)  # C = keys[64 rows, 32]
    keys = type(keys)("keys", keys.dims, keys.tensors[:2] + (type(keys.tensors[2])("K", (64, 32)),),
                      reads=keys.reads, writes=(type(keys.writes[0])("K", ("m", "n")),), macs=keys.macs)
    from loopwise.memory.ir import Access, Operator, Tensor

    scores = Operator("scores", {"i": 64, "j": 64, "d": 32}, (Tensor("Q", (64, 32)), Tensor("K", (64, 32)),
                                                              Tensor("S", (64, 64))),
                      reads=(Access("Q", ("i", "d")), Access("K", ("j", "d"))), writes=(Access("S", ("i", "j")),))
    g = Graph("attn", (keys, scores), frozenset({"B"}))
    planner = _Planner(g, 1 << 20, 16)
    grp = planner.evaluate(0, 2, [(None, "m"), (None, "i")], 64)  # K sliced by its producer, read whole by scores
    assert grp.slab.loops == (0, 1) and "K" in grp.resident
    k_bytes = 64 * 32 * 2
    assert grp.occupancy[1] > k_bytes  # all of K, beside Q's and S's slabs
    assert planner.evaluate(0, 2, None, 1) is not None  # whole, it fits


def test_attention_runs_one_sequence_at_a_time_then_row_by_row_when_neither_alone_fits():
    """Scores of a whole sequence do not fit, nor do every sequence's keys and values; a sequence's
    keys and values kept for its rows, one block of query rows at a time, do: two slab levels."""
    from loopwise.memory.graph import Graph
    from loopwise.memory.ir import Access, Operator, Tensor

    b, m, d = 4, 64, 32
    act = lambda name, *shape: Tensor(name, shape)  # noqa: E731
    scores = Operator("scores", {"b": b, "i": m, "j": m, "d": d}, (act("Q", b, m, d), act("K", b, m, d), act("S", b, m, m)),
                      reads=(Access("Q", ("b", "i", "d")), Access("K", ("b", "j", "d"))),
                      writes=(Access("S", ("b", "i", "j")),), macs=b * m * m * d)
    softmax = Operator("softmax", {"b": b, "i": m, "j": m}, (act("S", b, m, m), act("P", b, m, m)),
                       reads=(Access("S", ("b", "i", "j")),), writes=(Access("P", ("b", "i", "j")),),
                       coupled=frozenset({"j"}))
    mix = Operator("mix", {"b": b, "i": m, "e": d, "j": m}, (act("P", b, m, m), act("V", b, m, d), act("O", b, m, d)),
                   reads=(Access("P", ("b", "i", "j")), Access("V", ("b", "j", "e"))),
                   writes=(Access("O", ("b", "i", "e")),), macs=b * m * m * d)
    g = Graph("attention", (scores, softmax, mix))
    capacity = 12 * 1024  # one sequence's scores and probabilities: 16 KiB; all keys: 16 KiB
    p = plan(g, capacity_bytes=capacity)
    (grp,) = p.groups
    assert grp.slab is not None and grp.slab.outer_dims == ("b", "b", "b") and grp.slab.dims == ("i", "i", "i")
    assert grp.slab.outer_size < b and grp.peak_bytes <= capacity
    assert p.total_bytes == p.compulsory_bytes  # Q, K, V read once, O written once; S and P never leave


def test_each_group_traffic_is_attributed_to_its_operators():
    for g, capacity in ((_batched_chain(16), 3 * 2**20), (_batched_chain(16), 2 * 2**20 // 3), (_batched_chain(2), 1 << 30)):
        p = plan(g, capacity_bytes=capacity)
        for grp in p.groups:
            assert len(grp.per_operator) == len(grp.operators)
            assert abs(sum(grp.per_operator) - grp.traffic_bytes) <= len(grp.operators)  # rounding only


def test_a_tensor_kept_on_chip_between_two_groups_is_neither_stored_nor_loaded():
    """Keys made by one group (whole) and read by every row slab of the next: the two cannot be one
    group (the scores of all rows do not fit beside the keys, and the 48 key rows are no loop over
    the 64 query rows), but the keys can stay on chip across the boundary, so the plan moves only
    the compulsory traffic."""
    from loopwise.memory.graph import Graph
    from loopwise.memory.ir import Access, Operator, Tensor

    keys = Operator("keys", {"m": 48, "n": 32, "k": 32}, (Tensor("A", (48, 32)), Tensor("B", (32, 32)), Tensor("K", (48, 32))),
                    reads=(Access("A", ("m", "k")), Access("B", ("k", "n"))), writes=(Access("K", ("m", "n")),))
    # the scores with their softmax fused: a row of S needs every key (j is coupled)
    scores = Operator("scores", {"i": 64, "j": 48, "d": 32}, (Tensor("Q", (64, 32)), Tensor("K", (48, 32)), Tensor("S", (64, 48))),
                      reads=(Access("Q", ("i", "d")), Access("K", ("j", "d"))), writes=(Access("S", ("i", "j")),),
                      coupled=frozenset({"j"}))
    g = Graph("keys-then-scores", (keys, scores), frozenset({"B"}))
    capacity = 12 * 1024  # keys whole: 8 KiB; scores whole: 13 KiB; a row of scores beside all keys: ~3.2 KiB
    p = plan(g, capacity_bytes=capacity)
    assert [grp.operators for grp in p.groups] == [("keys",), ("scores",)]
    assert p.groups[0].carried_out == ("K",) and p.groups[1].carried_in == ("K",)
    assert p.total_bytes == p.compulsory_bytes and all(grp.peak_bytes <= capacity for grp in p.groups)
    # with no room to keep the keys beside a row of scores, they go out and come back
    tight = plan(g, capacity_bytes=4 * 1024 + 300)
    assert tight.total_bytes > tight.compulsory_bytes


def _keys_scores_softmax():
    """Keys made whole, then the scores of every query row against all of them and their softmax:
    the keys can stay on chip into a group that runs row slab by row slab."""
    from loopwise.memory.graph import Graph
    from loopwise.memory.ir import Access, Operator, Tensor

    keys = Operator("keys", {"m": 64, "n": 32, "k": 32}, (Tensor("A", (64, 32)), Tensor("B", (32, 32)), Tensor("K", (64, 32))),
                    reads=(Access("A", ("m", "k")), Access("B", ("k", "n"))), writes=(Access("K", ("m", "n")),))
    scores = Operator("scores", {"i": 64, "j": 64, "d": 32}, (Tensor("Q", (64, 32)), Tensor("K", (64, 32)), Tensor("S", (64, 64))),
                      reads=(Access("Q", ("i", "d")), Access("K", ("j", "d"))), writes=(Access("S", ("i", "j")),),
                      coupled=frozenset({"j"}))
    softmax = Operator("softmax", {"i": 64, "j": 64}, (Tensor("S", (64, 64)), Tensor("P", (64, 64))),
                       reads=(Access("S", ("i", "j")),), writes=(Access("P", ("i", "j")),), coupled=frozenset({"j"}))
    return Graph("keys-scores-softmax", (keys, scores, softmax), frozenset({"B"}))


# four capacities in the fast tier (the tightest, two between, the roomiest); the rest, about 4-8 s
# each, in the slow one
_SLOW = pytest.mark.slow


@pytest.mark.parametrize("capacity_kib", [3, 8, 24, 64] + [pytest.param(k, marks=_SLOW) for k in
                                                      (4, 5, 6, 7, 9, 10, 12, 14, 16, 20, 32, 48)])
def test_every_plan_passes_the_independent_replay(capacity_kib):
    """Whatever the capacity, the schedule of the plan fits at every step of every slab and moves
    exactly the traffic the plan claims; a tensor kept on chip across a boundary into or out of a
    slab loop is on chip for the whole loop, since other slabs still need it."""
    from loopwise.memory.verify import describe, verify

    capacity = capacity_kib * 1024
    for g in (_keys_scores_softmax(), _batched_chain(4)):
        p = plan(g, capacity_bytes=capacity)
        verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
        assert verdict.ok, "\n".join(describe(verdict))
        assert verdict.traffic_bytes == p.total_bytes and verdict.peak_bytes <= capacity


def test_a_tensor_carried_in_is_held_at_the_size_it_was_handed_over():
    """A stride-2 convolution reads a quarter of the map the group before left on chip; the whole
    map is still there until the convolution has run."""
    from loopwise.memory.graph import Graph
    from loopwise.memory.ir import conv2d, elementwise
    from loopwise.memory.planner import _Planner

    relu = elementwise("relu", (1, 16, 32, 32), ("x",), "y")
    down = conv2d("down", n=1, c=16, h=32, w=32, k=16, r=1, s=1, stride=2, tensors=("y", "w", "z"))
    g = Graph("relu-then-strided", (relu, down), frozenset({"w"}))
    planner = _Planner(g, 1 << 20, 16)
    whole_map = 16 * 32 * 32 * 2
    grp = planner.evaluate(1, 2, None, 1, carry_in=True)
    assert grp is not None and grp.carried_in == ("y",)
    assert grp.peak_bytes >= whole_map + 16 * 16 * 2 + 16 * 16 * 16 * 2
