"""A real model's fused group on a GPU (loopwise.memory.gpu_block): the MLP block read off a plan's
emitted schedule, its refusals, and the one-kernel version of it checked in Triton's interpreter
against the operators run one by one in float64."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from loopwise.errors import UserError
from loopwise.memory.gpu_block import block_from_plan, find_group
from loopwise.memory.plan_json import operator_bounds, plan_json
from loopwise.memory.planner import plan
from loopwise.memory.targets import load_target
from loopwise.memory.torch_import import import_module


class MlpBlock(nn.Module):
    """A ConvNeXt / transformer MLP block on a channels-last map: r + s * fc2(act(fc1(norm(x))))."""

    def __init__(self, c: int = 24, relu: bool = False, scale: bool = True, residual: bool = True) -> None:
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(c, eps=1e-6), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.act = nn.ReLU() if relu else nn.GELU()
        self.gamma = nn.Parameter(torch.ones(c)) if scale else None
        self.residual = residual

    def forward(self, x, r):
        y = self.fc2(self.act(self.fc1(self.norm(x))))
        y = self.gamma * y if self.gamma is not None else y
        return r + y if self.residual else y


def planned(capacity: int, shape=(2, 5, 7, 24), **kw):
    with torch.device("meta"):
        module, x, r = MlpBlock(shape[-1], **kw), torch.empty(*shape), torch.empty(*shape)
    imported = import_module(module, (x, r), name="block")
    p = plan(imported.graph, capacity)
    data = plan_json("block", load_target("gpu-sm-shared"), p, imported, operator_bounds(imported.graph, capacity), 0.0)
    return data, imported.graph


def test_the_block_is_read_off_the_schedule():
    """At 16 KiB the planner fuses the six operators into one group run in slabs; the block takes
    its slab's token tile from the schedule's loop nest, its tensors by role from the graph, and
    predicts the bytes the schedule's DMA transfers move: every activation once, the weights once."""
    data, graph = planned(16 * 1024)
    assert len(data["schedule"]["groups"]) == 1
    b = block_from_plan(data, graph)
    nest = {o["operator"]: o for o in data["schedule"]["groups"][0]["loop_nest"]["operators"]}["linear:linear"]
    tiles = {loop["dim"]: loop["tile"] for loop in nest["loops"]}
    assert b.token_tiles == (tiles["l0"], tiles["l1"], tiles["l2"]) and b.slab_tokens < b.tokens
    assert (b.x, b.residual, b.scale, b.activation) == ("x", "r", "p_gamma", "gelu")
    assert (b.channels, b.hidden, b.out_channels) == (24, 96, 24)
    act = 2 * 5 * 7 * 24 * 2
    weights = 2 * (96 * 24 * 2) + 2 * (96 + 24 + 24 + 24 + 24)
    assert b.planned_bytes == data["total_bytes"] == 3 * act + weights
    assert b.layer_by_layer_bytes == data["layer_by_layer_bytes"] > b.planned_bytes


def test_a_plan_without_the_block_is_refused_in_one_line():
    data, graph = planned(4 * 1024)  # too small: the planner splits the block into several groups
    with pytest.raises(UserError, match="no group of this plan is an MLP block"):
        find_group(data)
    with pytest.raises(UserError, match="is not an MLP block"):
        block_from_plan(data, graph, group=0)
    with pytest.raises(UserError, match="the plan has groups"):
        block_from_plan(data, graph, group=9)
    with pytest.raises(UserError, match="no schedule"):
        find_group({"groups": []})


def test_a_plan_of_another_model_or_batch_is_refused():
    data, graph = planned(16 * 1024)
    renamed = json.loads(json.dumps(data).replace("linear:linear_1", "linear:linear_9"))
    with pytest.raises(UserError, match="another model"):
        block_from_plan(renamed, graph)
    _, larger = planned(16 * 1024, shape=(3, 5, 7, 24))
    with pytest.raises(UserError, match="another batch or shape"):
        block_from_plan(data, larger)


FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "gpu_group")


def _launches(name: str):
    from loopwise.kernels.profile.ncu import parse_raw_csv

    with open(os.path.join(FIXTURES, name), encoding="utf-8", errors="replace") as f:
        return parse_raw_csv(f.read())


def test_dram_bytes_count_the_write_backs_after_the_kernel():
    """Recorded on the H200 (ConvNeXt-T's first block at batch 32; ncu, application replay, caches
    left alone): the fused kernel's own writes are a third of its output, the rest was still
    dirty in the L2 and reached DRAM during the eviction after it; what the eviction before wrote
    back was there before and does not count."""
    from loopwise.memory.gpu_block import dram_bytes

    got = dram_bytes(_launches("convnext_t_b32_fused.csv"))
    assert got["kernels"] == ["mlp_block"]
    assert (got["read"], got["write_in_kernels"], got["write_back_after"]) == (38714368, 6342656, 13604864)
    assert got["measured"] == 38714368 + 6342656 + 13604864 and got["dirty_before"] == 13245696
    torch_run = dram_bytes(_launches("convnext_t_b32_torch.csv"))
    assert len(torch_run["kernels"]) == 6 and torch_run["measured"] == 437421056


def test_a_range_without_its_evictions_is_refused():
    from loopwise.memory.gpu_block import dram_bytes

    launches = _launches("convnext_t_b32_torch.csv")
    for cut in (launches[1:], launches[:-1], launches[1:-1]):
        with pytest.raises(UserError, match="not an eviction"):
            dram_bytes(cut)


_INTERPRETED = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from test_gpu_block import planned
from loopwise.memory.gpu_block import block_from_plan, fused, layer_by_layer, make_tensors
out = []
for cap, kw in ((16 * 1024, {}), (16 * 1024, {"relu": True, "scale": False}), (1 << 20, {"residual": False})):
    data, graph = planned(cap, **kw)
    b = block_from_plan(data, graph)
    t = make_tensors(b, "cpu", torch.float32, seed=cap)
    ref = layer_by_layer(b, t, 1e-6, dtype=torch.float64)
    y = fused(b, t, 1e-6, block_h=32)
    out.append({"case": f"{cap} {kw}", "tiles": list(b.token_tiles), "shape": list(y.shape),
                "err": ((y.double() - ref).abs().max() / ref.abs().max()).item()})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_fused_kernel_computes_the_block(tmp_path):
    """In Triton's interpreter (its own process), float32, against the operators one by one in
    float64: GELU with scale and residual, ReLU without the scale, one slab of every token
    without the residual; 24 channels and 96 hidden units (not powers of two: masked)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _INTERPRETED, os.path.dirname(__file__)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(done.stdout.splitlines()[-1])
    assert len(cases) == 3
    assert cases[0]["tiles"] != [2, 5, 7] and cases[2]["tiles"] == [2, 5, 7]
    for case in cases:
        assert case["shape"] == [70, 24], case
        assert case["err"] < 1e-4, case


@pytest.mark.gpu
def test_the_fused_kernel_on_the_gpu_agrees_with_float64():
    from loopwise.memory.gpu_block import fused, layer_by_layer, make_tensors

    data, graph = planned(load_target("gpu-sm-shared").scratchpad.bytes, shape=(4, 9, 13, 96))
    b = block_from_plan(data, graph)
    assert b.slabs == 9 and b.token_tiles == (4, 1, 13)  # 52 tokens a slab: padded to 64 in the kernel
    t = make_tensors(b, "cuda", torch.bfloat16)
    ref = layer_by_layer(b, t, 1e-6, dtype=torch.float64)
    err = ((fused(b, t, 1e-6).double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 2e-2, err


@pytest.mark.slow
def test_the_kernel_compiles_for_hopper_at_the_checked_sizes():
    """Ahead of time for sm_90 (no GPU needed), in bf16, at ConvNeXt-T's first-stage block:
    32 tokens a slab, 96 -> 384 -> 96 channels."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from loopwise.memory import gpu_block

    pointers = ("x_ptr", "res_ptr", "y_ptr", "lnw_ptr", "lnb_ptr", "w1_ptr", "b1_ptr", "w2_ptr", "b2_ptr", "s_ptr")
    signature = {**{p: "*bf16" for p in pointers}, "eps": "fp32", "E0": "i32", "E1": "i32", "E2": "i32"}
    consts = dict(T0=32, T1=1, T2=1, C=96, H=384, O=96, BLOCK_T=32, BLOCK_C=128, BLOCK_H=64, BLOCK_O=128, GELU=True,
                  HAS_B1=True, HAS_B2=True, HAS_SCALE=True, HAS_RES=True)
    compiled = triton.compile(ASTSource(gpu_block._kernel(), {**signature, **{k: "constexpr" for k in consts}}, consts),
                              target=GPUTarget("cuda", 90, 32))
    assert "mma" in compiled.asm["ptx"]  # the two products on the tensor cores


def test_run_ncu_parses_what_ncu_wrote_and_names_a_failure(tmp_path, monkeypatch):
    """A stand-in ncu (a script that copies a recorded CSV to its --log-file, or fails): the
    launches come back parsed; a failure is one line with ncu's exit status and its output."""
    from loopwise.kernels.profile.ncu import NcuRunError, run_ncu

    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --log-file ] && cp \"$FIXTURE\" \"$2\"; shift; done\n"
                    "[ -n \"$FAIL\" ] && echo 'no kernels were profiled' >&2 && exit 3\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("FIXTURE", os.path.join(FIXTURES, "convnext_t_b32_fused.csv"))
    launches, seconds = run_ncu(["python", "x.py"], tmp_path / "out.csv", ncu=str(fake), timeout=30,
                                metrics=("dram__bytes_read.sum",))
    assert [launch.name for launch in launches][1] == "mlp_block" and seconds >= 0
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(NcuRunError, match="ncu rc 3: no kernels were profiled"):
        run_ncu(["python", "x.py"], tmp_path / "out2.csv", ncu=str(fake), timeout=30, metrics=("dram__bytes_read.sum",))
