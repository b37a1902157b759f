"""Micro-profiling tools on the committed sm_90 cubins (profile_fixtures/), the occupancy and wave
arithmetic they share, and the labelled set: the top-ranked finding must be the expected one for
at least 90% of the cases."""

from __future__ import annotations

import json

import pytest

from loopwise.kernels.moves import ParameterMove, StructuralMove
from loopwise.kernels.profile import registry
from loopwise.kernels.profile.findings import H200, DeviceFacts, LaunchConfig, ProblemHints, ToolInput
from loopwise.kernels.profile.occupancy import theoretical_occupancy, waves
from loopwise.kernels.profile.sass import KernelSass
from loopwise.kernels.profile.tools.narrow_accesses import TOOL as NARROW
from loopwise.kernels.profile.tools.occupancy import TOOL as OCCUPANCY
from loopwise.kernels.profile.tools.spills import TOOL as SPILLS
from loopwise.kernels.profile.tools.tail_effect import TOOL as TAIL
from loopwise.kernels.profile.tools.tensor_core_precision import TOOL as PRECISION
from loopwise.kernels.profile.tools.tensor_cores_unused import TOOL as UNUSED

from sass_fixtures import EXPECTED, FIXTURES, fixture_profile, needs_tools  # noqa: E402 - tests/kernels on sys.path

LABELS = json.loads((FIXTURES / "findings_labels.json").read_text())["cases"]


def _kernel(name: str) -> KernelSass:
    """SASS record of a committed cubin (the only kernel in it)."""
    return fixture_profile(name).kernel()


def _input(name: str, *, grid: int | None = None, matmul: bool = False, precision: str = "fp32",
           dtype: str | None = None) -> ToolInput:
    launch = LaunchConfig(grid_blocks=grid, num_warps=EXPECTED[name]["num_warps"])
    return ToolInput(sass=_kernel(name), launch=launch,
                     hints=ProblemHints(matmul_shaped=matmul, precision=precision, input_dtype=dtype))


# ---------------------------------------------------------------------------------------------
# Occupancy and waves (no cubin needed)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("warps", "registers", "shared", "blocks", "limiter"), [
    (4, None, None, 16, "warps"),        # nothing known but the block: 64 warps / 4
    (4, 26, 0, 16, "registers"),         # 26 x 32 rounds to 1024 per warp: 64 warps, ties the warp cap
    (4, 64, None, 8, "registers"),       # 2048 per warp: 32 warps
    (4, 96, 32768, 5, "registers"),      # 3072 per warp: 21 warps -> 5 blocks; shared allows 6
    (4, 32, 32768, 6, "shared"),         # (32768 + 1024) per block: 6 in 228 KB
    (8, 255, None, 1, "registers"),      # 8192 per warp: 8 warps
    (1, 16, None, 32, "blocks"),         # one-warp blocks hit the 32-block cap (50%)
    (4, 32, 240_000, 0, "shared"),       # more than 227 KB: does not fit
])
def test_theoretical_occupancy(warps, registers, shared, blocks, limiter):
    occ = theoretical_occupancy(H200, warps, registers, shared)
    assert occ.blocks_per_sm == blocks and occ.occupancy == pytest.approx(blocks * warps / 64)
    assert occ.limiter == limiter  # on a tie, the resource a kernel change can free is named


def test_waves_full_partial_and_underfilled():
    full = waves(H200, 2 * 132 * 8, 8)
    assert full.waves == 2 and full.last_wave_fraction == 1.0 and full.efficiency == 1.0
    tail = waves(H200, 1100, 8)  # 1056 slots: 1.04 waves
    assert tail.full_waves == 1 and tail.last_wave_fraction == pytest.approx(44 / 1056)
    assert tail.efficiency == pytest.approx(1100 / 2112)
    small = waves(H200, 66, 8)
    assert small.busy_sms == 66 and small.efficiency == pytest.approx(0.5)
    assert waves(H200, 500, 8).efficiency == 1.0  # one wave reaching every SM is not a tail
    assert waves(DeviceFacts(sm_count=10), 25, 1).efficiency == pytest.approx(25 / 30)


# ---------------------------------------------------------------------------------------------
# Each tool on the cubins
# ---------------------------------------------------------------------------------------------

@needs_tools
def test_spills_fire_on_the_capped_matmul_only():
    [finding] = SPILLS.run(_input("matmul_spill"))
    assert finding.severity == "high" and finding.evidence["spill_bytes"] == 3424 + 3380
    assert finding.evidence["local_loads"] > 700 and finding.evidence["registers_per_thread"] == 32
    assert "32 registers" in finding.guidance and StructuralMove("reduce_registers") in finding.moves
    assert ParameterMove.of(warps=8) in finding.moves
    for clean in ("matmul_fp16", "matmul_fp32_ieee", "vector_add"):
        assert SPILLS.run(_input(clean)) == []


@needs_tools
def test_spills_weigh_the_local_traffic_ncu_counted():
    """With ncu, the score follows the share of the L1 sectors that were spill traffic."""
    from ncu_synthetic import metrics

    static = SPILLS.run(_input("matmul_spill"))[0]
    heavy = {"l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum": 2.3e9, "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum": 2.2e9,
             "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 1.3e8, "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 1e7}
    inp = _input("matmul_spill").model_copy(update={"ncu": metrics(heavy)})
    [finding] = SPILLS.run(inp)
    assert finding.evidence["local_sector_share"] == pytest.approx(4.5e9 / 4.64e9, abs=1e-4)
    assert finding.score == 0.95 >= static.score  # 97% of the traffic, at the cap
    assert "97% of the sectors" in finding.guidance


@needs_tools
def test_narrow_accesses_fire_on_the_gather_not_on_vector_add():
    [finding] = NARROW.run(_input("strided_gather"))
    assert finding.evidence["narrow_fraction"] == 1.0 and finding.evidence["accesses_4_bytes"] == 16
    assert "16 of the kernel's 16 global accesses" in finding.guidance
    assert finding.moves == (StructuralMove("vectorize_loads"), StructuralMove("coalesce_accesses"))
    assert NARROW.run(_input("vector_add")) == [] and NARROW.run(_input("matmul_fp16")) == []


@needs_tools
def test_tensor_cores_unused_on_the_ffma_matmul_only():
    [strict] = UNUSED.run(_input("matmul_fp32_ieee", matmul=True, precision="fp32"))
    assert strict.moves == (StructuralMove("use_tf32x3"), StructuralMove("use_bf16x3")) and strict.evidence["ffma"] == 1024
    assert strict.severity == "high" and "2.7x" in strict.guidance
    [relaxed] = UNUSED.run(_input("matmul_fp32_ieee", matmul=True, precision="relaxed"))
    assert relaxed.moves == (StructuralMove("use_tensor_cores"),) and relaxed.score > strict.score
    assert UNUSED.run(_input("matmul_fp32_ieee", matmul=False)) == []  # no hint: not known to be a matmul
    assert UNUSED.run(_input("matmul_fp16", matmul=True)) == []


@needs_tools
def test_precision_path_violation_under_fp32_only():
    [finding] = PRECISION.run(_input("matmul_tf32", matmul=True, precision="fp32"))
    assert finding.score == 1.0 and finding.evidence["operand_type"] == "TF32"
    assert StructuralMove("use_tf32x3") in finding.moves
    assert PRECISION.run(_input("matmul_tf32", matmul=True, precision="relaxed")) == []
    assert PRECISION.run(_input("matmul_bf16", precision="relaxed", dtype="fp32")) == []
    assert PRECISION.run(_input("matmul_fp16", precision="fp32", dtype="fp16")) == []  # nothing rounded
    [mismatch] = PRECISION.run(_input("matmul_fp16", precision="relaxed", dtype="bf16"))
    assert mismatch.severity == "high" and mismatch.moves == (StructuralMove("match_input_precision"),)
    [upcast] = PRECISION.run(_input("matmul_tf32", precision="relaxed", dtype="bf16"))
    assert upcast.severity == "medium"
    assert PRECISION.run(_input("matmul_fp32_ieee")) == []  # no tensor cores: the other tool's business
    # a 3xTF32 candidate shows the same tf32 operands; its source says it compensates
    compensated = _input("matmul_tf32", matmul=True, precision="fp32")
    compensated = compensated.model_copy(update={"hints": compensated.hints.model_copy(update={"compensated": True})})
    assert PRECISION.run(compensated) == []


def test_the_profiler_reads_a_compensated_product_off_the_source():
    from loopwise.kernels.profile.run import COMPENSATED

    for text in ('tl.dot(a, b, input_precision="tf32x3")', "tl.dot(a, b, input_precision = 'tf32x3')",
                 "# 3xTF32: split each operand", "a bf16x3 split"):
        assert COMPENSATED.search(text), text
    for text in ('tl.dot(a, b, input_precision="tf32")', "tl.dot(a, b)", "torch.backends.cuda.matmul.allow_tf32"):
        assert not COMPENSATED.search(text), text


@needs_tools
def test_low_occupancy_names_its_limiter():
    [regs] = OCCUPANCY.run(_input("matmul_fp32_ieee", grid=2640))
    assert regs.evidence["limiter"] == "registers" and regs.evidence["warps_per_sm"] == 20
    assert "96 registers per thread" in regs.guidance and StructuralMove("reduce_registers") in regs.moves
    [smem] = OCCUPANCY.run(_input("matmul_tf32", grid=2112))
    assert smem.evidence["limiter"] == "shared" and smem.evidence["blocks_per_sm"] == 4
    assert OCCUPANCY.run(_input("matmul_fp16", grid=1056)) == []  # 8 blocks x 4 warps: 50%
    assert OCCUPANCY.run(_input("vector_add", grid=1)) == []


@needs_tools
def test_tail_effect_from_grid_and_residency():
    [tail] = TAIL.run(_input("matmul_fp16", grid=1100))  # 8 per SM -> 1056 slots
    assert tail.evidence["slots"] == 1056 and tail.evidence["full_waves"] == 1
    assert "1.04 waves" in tail.guidance and StructuralMove("persistent_kernel") in tail.moves
    assert TAIL.run(_input("matmul_fp16", grid=2112)) == []
    [small] = TAIL.run(_input("matmul_fp16", grid=64, matmul=True))
    assert small.evidence["busy_sms"] == 64 and StructuralMove("split_k") in small.moves
    assert TAIL.run(_input("matmul_fp16")) == []  # no grid: silent


# ---------------------------------------------------------------------------------------------
# Labelled set
# ---------------------------------------------------------------------------------------------

def _top(case: dict) -> str | None:
    name = case["fixture"]
    inp = ToolInput(sass=_kernel(name), launch=LaunchConfig(**case["launch"]), hints=ProblemHints(**case["hints"]))
    findings = registry.diagnose(inp, "all")
    return findings[0].tool if findings else None


@needs_tools
def test_labelled_set_top1_at_least_90_percent():
    results = {case["id"]: (_top(case), case["expected"]) for case in LABELS}
    misses = {k: v for k, v in results.items() if v[0] != v[1]}
    accuracy = 1 - len(misses) / len(results)
    assert len(results) >= 12
    assert accuracy >= 0.9, f"top-1 {accuracy:.0%}; misses (got, expected): {misses}"
