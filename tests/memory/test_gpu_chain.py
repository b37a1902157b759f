"""The hierarchy check's chain (loopwise.memory.gpu_chain): the plan it is read from, and the
Triton kernels that carry the plan out, checked in Triton's interpreter against float64."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from loopwise.errors import UserError
from loopwise.memory.gpu_chain import Chain, fused, launch_from_plan, unfused
from loopwise.memory.targets import load_target

SMEM = load_target("gpu-sm-shared").scratchpad.bytes


def test_the_plan_fuses_the_chain_and_predicts_only_compulsory_traffic():
    """At the checked sizes (4 Mi rows, 64 -> 256 -> 64, bf16) the plan keeps W1 and W2 resident,
    H and R never leave the chip, and X and Y cross DRAM once; layer by layer, H and R go out
    and come back."""
    c = Chain(1 << 22, 64, 256, 64)
    launch = launch_from_plan(c, SMEM)
    x, w1, w2, y = c.m * 64 * 2, 64 * 256 * 2, 256 * 64 * 2, c.m * 64 * 2
    h = c.m * 256 * 2
    assert launch.fused_bytes == launch.compulsory_bytes == x + w1 + w2 + y
    assert launch.layer_by_layer_bytes == (x + w1 + h) + (h + h) + (h + w2 + y)
    assert launch.plan.groups[0].resident == ("H", "R")
    assert launch.block_m == 128 and launch.slab_rows >= 128 and launch.block_h == 64


def test_at_equal_traffic_the_plan_takes_the_larger_slab():
    """Every slab size moves the same bytes here; the plan takes the largest that fits (fewest
    slabs, fewest DMA descriptors), not one row at a time."""
    c = Chain(1 << 20, 128, 128, 128, relu=False)
    slab = launch_from_plan(c, SMEM).plan.groups[0].slab
    per_row = 2 * 128 * 2  # two of X, H, Y are alive at each operator
    assert slab.size * per_row + 2 * 128 * 128 * 2 <= SMEM < 2 * slab.size * per_row + 2 * 128 * 128 * 2


def test_a_plan_that_streams_the_weights_is_refused_by_name():
    with pytest.raises(UserError, match="does not fuse|streams"):
        launch_from_plan(Chain(1 << 16, 256, 512, 256), 64 * 1024)


@pytest.mark.parametrize("sizes", [(0, 64, 64, 64), (64, 48, 64, 64), (64, 64, 8, 64)])
def test_sizes_the_kernels_cannot_take_are_one_line_errors(sizes):
    with pytest.raises(UserError, match="chain size"):
        Chain(*sizes)


def test_shapes_that_do_not_chain_are_refused():
    with pytest.raises(UserError, match="do not chain"):
        fused(torch.zeros(8, 32), torch.zeros(16, 64), torch.zeros(64, 32), launch_from_plan(Chain(8, 32, 64, 32), SMEM))


_INTERPRETED = """
import json, sys, torch
from loopwise.memory.gpu_chain import Chain, fused, launch_from_plan, unfused
out = []
for dtype, rows, relu in ((torch.float32, 100, True), (torch.float16, 70, True),
                          (torch.float32, 1, False), (torch.float16, 16, False)):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 32, generator=gen)
    w1 = torch.randn(32, 64, generator=gen) / 4
    w2 = torch.randn(64, 16, generator=gen) / 8
    hidden = x.double() @ w1.double()
    ref = (hidden.relu() if relu else hidden) @ w2.double()
    launch = launch_from_plan(Chain(rows, 32, 64, 16, relu=relu), int(sys.argv[1]))
    for name, y in (("fused", fused(x.to(dtype), w1.to(dtype), w2.to(dtype), launch, relu=relu)),
                    ("unfused", unfused(x.to(dtype), w1.to(dtype), w2.to(dtype), relu=relu, block_m=16))):
        out.append({"case": f"{name} {dtype} rows={rows} relu={relu}", "dtype": str(y.dtype),
                    "shape": list(y.shape), "err": (y.double() - ref).abs().max().item()})
print(json.dumps(out))
"""


def test_fused_and_unfused_kernels_compute_the_chain(tmp_path):
    """In Triton's interpreter (its own process: Triton reads TRITON_INTERPRET when it is first
    imported), against float64: rows that are not a multiple of the block, a single row, with and
    without the ReLU, in float32 and float16 (the interpreter has no bfloat16)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _INTERPRETED, str(SMEM)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(done.stdout.splitlines()[-1])
    assert len(cases) == 8
    for case in cases:
        tol = 1e-5 if "float32" in case["case"] else 2e-2
        assert case["dtype"] in case["case"] and case["shape"][1] == 16, case
        assert case["err"] < tol, case


@pytest.mark.gpu
def test_the_kernels_on_the_gpu_agree_with_float64():
    c = Chain(3000, 64, 256, 64)
    launch = launch_from_plan(c, SMEM)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(c.m, c.k, device="cuda", generator=gen).bfloat16()
    w1 = (torch.randn(c.k, c.n1, device="cuda", generator=gen) / 8).bfloat16()
    w2 = (torch.randn(c.n1, c.n2, device="cuda", generator=gen) / 16).bfloat16()
    ref = (x.double() @ w1.double()).relu() @ w2.double()
    for y in (fused(x, w1, w2, launch), unfused(x, w1, w2)):
        assert torch.allclose(y.double(), ref, atol=3e-2, rtol=3e-2), (y.double() - ref).abs().max()
