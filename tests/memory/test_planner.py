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
