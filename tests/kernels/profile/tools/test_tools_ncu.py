"""The ncu-based and cross-kernel micro-profiling tools, each on a firing and a non-firing case.

The metric values are synthetic (``ncu_synthetic``: hand-made but physically consistent, no GPU ran
them); recorded H200 ncu fixtures will replace them. Edge cases: metrics missing (no finding),
zero requests / wavefronts / stall samples (no division error, no finding).
"""

from __future__ import annotations

import pytest

from loopwise.kernels.moves import ParameterMove, StructuralMove
from loopwise.kernels.profile.findings import H200, KernelSummary, LaunchConfig, ProblemHints, ToolInput
from loopwise.kernels.profile.ncu import KernelLaunch, Measured, derive
from loopwise.kernels.profile.tools.bank_conflicts import TOOL as BANKS
from loopwise.kernels.profile.tools.divergence import TOOL as DIVERGENCE
from loopwise.kernels.profile.tools.l2_reuse import TOOL as L2
from loopwise.kernels.profile.tools.launch_bound import TOOL as LAUNCH
from loopwise.kernels.profile.tools.memory_sol import TOOL as MEMORY_SOL
from loopwise.kernels.profile.tools.redundant_passes import TOOL as FUSION
from loopwise.kernels.profile.tools.stalls import TOOL as STALLS
from loopwise.kernels.profile.tools.uncoalesced import TOOL as UNCOALESCED

import ncu_synthetic as syn


def _ncu(raw, **kw) -> ToolInput:
    return ToolInput(ncu=syn.metrics(raw, **kw))


def test_raw_metrics_reach_the_tools_through_derive():
    launch = KernelLaunch(id=0, name="k", grid=(10, 1, 1), block=(256, 1, 1), device=0, compute_capability="9.0",
                          metrics={"lts__t_sector_hit_rate.pct": Measured(42.0, "%"),
                                   "gpu__time_duration.sum": Measured(1e-5, "second"),
                                   "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": Measured(None, "")})
    m = derive(launch)
    assert m.metric("lts__t_sector_hit_rate.pct") == 42.0
    assert m.metric("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum") is None  # n/a stays unknown
    assert H200.l2_bytes == 62_914_560


# ---- 1. uncoalesced global access -------------------------------------------------------------

def test_uncoalesced_fires_on_32_sectors_per_request():
    [f] = UNCOALESCED.run(_ncu(syn.UNCOALESCED))
    assert f.evidence["sectors_per_request_ld"] == 32.0 and f.evidence["ideal_sectors_per_request"] == 4
    assert f.evidence["width_assumed"] is True and StructuralMove("coalesce_accesses") in f.moves and "32.0 sectors" in f.guidance


def test_uncoalesced_quiet_when_coalesced_or_vector_width_explains_the_sectors():
    assert UNCOALESCED.run(_ncu(syn.COALESCED)) == []
    # 16 sectors per request with 16-byte vector loads (from SASS) is the ideal, not waste
    from loopwise.kernels.profile.sass import KernelSass
    sass = KernelSass(name="v", instructions=10, opcodes={}, families={}, global_loads={16: 4}, global_stores={16: 2})
    raw = {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 1.6e7,
           "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 1e6}
    assert UNCOALESCED.run(ToolInput(ncu=syn.metrics(raw), sass=sass)) == []
    assert UNCOALESCED.run(_ncu(raw))  # without SASS the 4-byte assumption flags it


def test_uncoalesced_edge_cases():
    assert UNCOALESCED.run(_ncu({})) == []
    zero = {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 0.0, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 0.0}
    assert UNCOALESCED.run(_ncu(zero)) == []
    assert UNCOALESCED.run(_ncu({"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 3.2e7})) == []


# ---- 2. shared-memory bank conflicts ----------------------------------------------------------

def test_bank_conflicts_fire_on_column_reads():
    [f] = BANKS.run(_ncu(syn.BANK_CONFLICTS))
    assert f.evidence["conflict_share"] > 0.9 and f.moves == (StructuralMove("swizzle_shared_memory"),)


def test_bank_conflicts_quiet_and_edge_cases():
    assert BANKS.run(_ncu(syn.NO_CONFLICTS)) == []
    assert BANKS.run(_ncu({})) == []
    zero = {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 0.0,
            "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 0.0}
    assert BANKS.run(_ncu(zero)) == []
    # requests stand in for missing wavefronts: 1e6 requests + 3e6 conflicts = 4 wavefronts per access
    raw = {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 3e6,
           "l1tex__t_requests_pipe_lsu_mem_shared_op_ld.sum": 1e6}
    [f] = BANKS.run(_ncu(raw))
    assert f.evidence["wavefronts_per_access"] == pytest.approx(4.0)


# ---- 3. memory-bound far from the roofline ----------------------------------------------------

def test_memory_sol_fires_with_the_byte_budget():
    inp = ToolInput(classification=syn.classification(fraction=0.3), ncu=syn.metrics(),
                    hints=ProblemHints(min_dram_bytes=100e6), launch=LaunchConfig(num_warps=4, block=1024))
    [f] = MEMORY_SOL.run(inp)
    assert f.evidence["ceiling_gbs"] == pytest.approx(4000.0) and f.evidence["achieved_gbs"] == pytest.approx(1200.0)
    assert f.evidence["bytes_over_budget"] == pytest.approx(3.0) and "3.0x" in f.guidance
    assert f.moves[0] == StructuralMove("fuse_kernels") and ParameterMove.of(block=2048) in f.moves


def test_memory_sol_quiet_at_roofline_or_other_class():
    assert MEMORY_SOL.run(ToolInput(classification=syn.classification(fraction=0.85))) == []
    assert MEMORY_SOL.run(ToolInput(classification=syn.classification("compute_bound", bound="compute"))) == []
    [f] = MEMORY_SOL.run(ToolInput(classification=syn.classification(fraction=0.5)))  # no ncu, no budget
    assert StructuralMove("fuse_kernels") not in f.moves and f.evidence["bytes_moved"] == pytest.approx(300e6)


# ---- 4. redundant passes across kernels -------------------------------------------------------

def test_redundant_passes_fire_over_the_budget():
    [f] = FUSION.run(ToolInput(kernels=syn.unfused_kernels(), hints=ProblemHints(min_dram_bytes=128e6)))
    assert f.evidence["bytes_over_budget"] == pytest.approx(3.0) and f.moves == (StructuralMove("fuse_kernels"),)


def test_redundant_passes_quiet_without_budget_or_within_it():
    assert FUSION.run(ToolInput(kernels=syn.unfused_kernels())) == []
    assert FUSION.run(ToolInput(kernels=syn.unfused_kernels(), hints=ProblemHints(min_dram_bytes=300e6))) == []
    one = syn.unfused_kernels()[:1]
    assert FUSION.run(ToolInput(kernels=one, hints=ProblemHints(min_dram_bytes=1e6))) == []
    assert FUSION.run(ToolInput(kernels=(), hints=ProblemHints(min_dram_bytes=1e6))) == []


# ---- 5. launch-bound ----------------------------------------------------------------------------

def test_launch_bound_fires_on_short_kernels_with_gaps():
    [f] = LAUNCH.run(ToolInput(kernels=syn.short_kernels()))
    assert f.evidence["gap_share"] > 0.6 and f.moves == (StructuralMove("use_cuda_graphs"), StructuralMove("fuse_kernels"))
    [est] = LAUNCH.run(ToolInput(kernels=syn.short_kernels(gap_s=None)))
    assert est.evidence["gaps_estimated"] is True and est.score < f.score


def test_launch_bound_quiet_cases():
    assert LAUNCH.run(ToolInput(kernels=syn.short_kernels(2))) == []
    assert LAUNCH.run(ToolInput(kernels=syn.short_kernels(duration_s=200e-6))) == []  # long kernels
    assert LAUNCH.run(ToolInput(kernels=syn.short_kernels(gap_s=0.2e-6))) == []      # gaps negligible
    assert LAUNCH.run(ToolInput(kernels=syn.short_kernels(5, gap_s=None))) == []     # too few to estimate


# ---- 6. warp divergence -------------------------------------------------------------------------

def test_divergence_fires_below_24_active_threads():
    [f] = DIVERGENCE.run(_ncu(syn.DIVERGENT))
    assert f.evidence["active_threads_per_instruction"] == 12.5 and f.moves == (StructuralMove("uniform_branches"),)
    [g] = DIVERGENCE.run(_ncu({"smsp__sass_average_branch_targets_threads_uniform.pct": 40.0}))
    assert "40%" in g.guidance


def test_divergence_quiet_and_edge_cases():
    assert DIVERGENCE.run(_ncu(syn.UNIFORM)) == []
    assert DIVERGENCE.run(_ncu({})) == []
    assert DIVERGENCE.run(_ncu({"smsp__thread_inst_executed_per_inst_executed.ratio": 0.0})) == []


# ---- 7. L2 reuse --------------------------------------------------------------------------------

def test_l2_reuse_fires_on_a_reread_working_set_that_fits():
    inp = ToolInput(ncu=syn.metrics(syn.L2_MISSING), hints=ProblemHints(min_dram_bytes=40e6),
                    classification=syn.classification())
    [f] = L2.run(inp)
    assert f.evidence["l2_hit_rate_pct"] == 20.0 and f.evidence["l2_requested_over_working_set"] == pytest.approx(9.6)
    assert StructuralMove("reorder_blocks") in f.moves


def test_l2_reuse_quiet_cases():
    budget = ProblemHints(min_dram_bytes=40e6)
    assert L2.run(ToolInput(ncu=syn.metrics(syn.L2_HITTING), hints=budget)) == []
    assert L2.run(ToolInput(ncu=syn.metrics(syn.L2_MISSING), hints=ProblemHints(min_dram_bytes=200e6))) == []  # > L2
    stream = {"lts__t_sector_hit_rate.pct": 5.0, "lts__t_sectors.sum": 1.25e6}  # each byte requested once
    assert L2.run(ToolInput(ncu=syn.metrics(stream, dram_read=30e6, dram_write=10e6), hints=budget)) == []
    assert L2.run(ToolInput(ncu=syn.metrics({}), hints=budget)) == []
    assert L2.run(ToolInput(ncu=syn.metrics({"lts__t_sector_hit_rate.pct": 5.0}, dram_read=None))) == []


# ---- 8. stall reasons ---------------------------------------------------------------------------

def test_stalls_report_the_top_two_with_meanings():
    inp = ToolInput(ncu=syn.metrics(syn.STALLS_MEMORY), launch=LaunchConfig(num_warps=4))
    [f] = STALLS.run(inp)
    assert f.evidence["top_reason"] == "long_scoreboard" and f.evidence["second_reason"] == "barrier"
    assert f.evidence["top_share"] == pytest.approx(6.0 / 8.6, abs=1e-3)  # 'selected' is not a stall
    assert "global" in f.guidance and ParameterMove.of(warps=8) in f.moves


def test_stalls_other_families_and_quiet_cases():
    sampled = {"smsp__pcsamp_warps_issue_stalled_barrier": 900.0, "smsp__pcsamp_warps_issue_stalled_wait": 100.0,
               "smsp__pcsamp_warps_issue_stalled_barrier_not_issued": 5000.0}
    [f] = STALLS.run(ToolInput(ncu=syn.metrics(sampled), launch=LaunchConfig(num_warps=8)))
    assert f.evidence["top_reason"] == "barrier" and f.evidence["top_share"] == pytest.approx(0.9)
    assert ParameterMove.of(warps=4) in f.moves
    assert STALLS.run(_ncu(syn.STALLS_BUSY)) == []  # not_selected on top: the scheduler is busy
    assert STALLS.run(_ncu({})) == []
    zeros = {"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 0.0}
    assert STALLS.run(_ncu(zeros)) == []
    even = {f"smsp__average_warp_latency_issue_stalled_{r}.ratio": 1.0 for r in
            ("long_scoreboard", "barrier", "wait", "mio_throttle")}
    assert STALLS.run(_ncu(even)) == []  # no reason above 30%


def test_kernel_summary_validates():
    with pytest.raises(ValueError):
        KernelSummary(name="k", duration_s=0.0)


# ---- ranking: specific causes before generic symptoms ------------------------------------------

def test_stalls_on_a_kernel_at_its_roofline_are_not_worth_fixing():
    """A streaming kernel at the DRAM roofline stalls on memory by design: the stall finding keeps
    only the headroom to the speed of light."""
    far = STALLS.run(ToolInput(ncu=syn.metrics(syn.STALLS_MEMORY), classification=syn.classification(fraction=0.3)))
    near = STALLS.run(ToolInput(ncu=syn.metrics(syn.STALLS_MEMORY), classification=syn.classification(fraction=0.98)))
    assert far[0].score == pytest.approx(0.5 * 6.0 / 8.6 * 0.7, abs=1e-3)
    assert near[0].severity == "info" and near[0].evidence["headroom_to_sol"] == pytest.approx(0.02)


def test_generic_symptoms_keep_only_what_the_specific_cause_leaves_unexplained():
    from loopwise.kernels.profile.registry import diagnose

    raw = dict(syn.STALLS_MEMORY) | {"memory_l2_theoretical_sectors_global": 7.5e7,
                                     "memory_l2_theoretical_sectors_global_ideal": 1.68e7}
    inp = ToolInput(ncu=syn.metrics(raw), classification=syn.classification(fraction=0.3))
    found = diagnose(inp, mode="all", tools=(STALLS, MEMORY_SOL, UNCOALESCED))
    assert [f.tool for f in found][0] == "uncoalesced_access" and len(found) == 3
    specific = found[0].score
    alone = {f.tool: f.score for f in diagnose(inp, mode="all", tools=(STALLS, MEMORY_SOL))}
    for f in found[1:]:
        assert f.score == pytest.approx(alone[f.tool] * (1 - specific), abs=2e-4)
        assert f.evidence["unexplained_share"] == pytest.approx(1 - specific, abs=1e-4)


def test_uncoalesced_reads_ncus_ideal_sector_count_when_present():
    # 4.5x the ideal sectors (a naive transpose's strided stores) fires whatever the access width ...
    strided = {"memory_l2_theoretical_sectors_global": 7.5e7, "memory_l2_theoretical_sectors_global_ideal": 1.68e7}
    [f] = UNCOALESCED.run(ToolInput(ncu=syn.metrics(strided), classification=syn.classification()))
    assert f.evidence["excess"] == pytest.approx(4.464, abs=1e-3) and f.score == pytest.approx(0.8 * (1 - 1 / 4.464), abs=1e-3)
    # ... and PyTorch's vectorized kernels, 16 sectors per 4-byte-looking request, are not flagged
    vectorized = dict(syn.UNCOALESCED) | {"memory_l2_theoretical_sectors_global": 3.6e7,
                                          "memory_l2_theoretical_sectors_global_ideal": 3.6e7}
    assert UNCOALESCED.run(_ncu(vectorized)) == []
