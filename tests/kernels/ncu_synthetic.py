"""Synthetic ncu inputs for the ncu-based tools: hand-made, physically consistent metric values.

These are synthetic (no GPU ran them); recorded H200 ncu fixtures will replace them. Consistency kept
by hand: sectors >= requests, bank conflicts <= wavefronts, hit rates in 0..100, active threads in
1..32, bytes = bandwidth x time.
"""

from __future__ import annotations

from loopwise.kernels.profile.classify import Classification
from loopwise.kernels.profile.findings import KernelSummary
from loopwise.kernels.profile.ncu import KernelMetrics


def metrics(raw: dict[str, float] | None = None, *, name: str = "k", duration_s: float = 100e-6,
            dram_read: float | None = 200e6, dram_write: float | None = 100e6, block_threads: int | None = 256,
            grid_blocks: int | None = 4096) -> KernelMetrics:
    dram = None if dram_read is None or dram_write is None else dram_read + dram_write
    return KernelMetrics(
        name=name, duration_s=duration_s, dram_read_bytes=dram_read, dram_write_bytes=dram_write,
        dram_bytes=dram, fp32_flops=None, tensor_ops=None, tensor_instructions=None, tensor_pipe_pct=None,
        occupancy_pct=None, sm_throughput_pct=None, memory_throughput_pct=None, grid_blocks=grid_blocks,
        block_threads=block_threads, registers_per_thread=None, raw=dict(raw or {}))


def classification(kernel_class: str = "memory_bound", *, fraction: float = 0.3, bytes_: float = 300e6,
                   bandwidth_gbs: float = 4000.0, bound: str = "memory") -> Classification:
    """A verdict whose numbers agree: sol = bytes / bandwidth, time = sol / fraction."""
    sol = bytes_ / (bandwidth_gbs * 1e9)
    time = sol / fraction
    return Classification(kernel="k", kernel_class=kernel_class, bound=bound, sol_time_s=sol, memory_time_s=sol,
                          compute_time_s=None, fraction_of_sol=fraction, at_roofline=fraction >= 0.8,
                          arithmetic_intensity=None, ridge_point=None, achieved_gbs=bytes_ / time / 1e9,
                          achieved_tflops=None, explanation="")


UNCOALESCED = {  # stride-8 fp32 loads: 32 sectors per request; stores coalesced
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 3.2e7, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 1e6,
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 4e6, "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": 1e6,
}
COALESCED = {
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 4e6, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 1e6,
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 4.2e6, "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": 1e6,
}
BANK_CONFLICTS = {  # a 32x32 fp32 tile read down a column: 32-way conflicts on loads
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 3.1e7,
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 3.2e7,
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": 0.0,
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": 1e6,
}
NO_CONFLICTS = {
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 1e4,
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 1e6,
}
DIVERGENT = {"smsp__thread_inst_executed_per_inst_executed.ratio": 12.5,
             "smsp__sass_average_branch_targets_threads_uniform.pct": 40.0}
UNIFORM = {"smsp__thread_inst_executed_per_inst_executed.ratio": 31.8,
           "smsp__sass_average_branch_targets_threads_uniform.pct": 99.0}
L2_MISSING = {"lts__t_sector_hit_rate.pct": 20.0, "lts__t_sectors.sum": 1.2e7}  # 384 MB requested, ~300 MB missed to DRAM
L2_HITTING = {"lts__t_sector_hit_rate.pct": 85.0, "lts__t_sectors.sum": 1.2e7}
STALLS_MEMORY = {f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio": v for r, v in
                 (("long_scoreboard", 6.0), ("barrier", 1.5), ("wait", 0.8), ("selected", 1.0),
                  ("not_selected", 0.2), ("math_pipe_throttle", 0.1))}
STALLS_BUSY = {f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio": v for r, v in
               (("not_selected", 5.0), ("long_scoreboard", 1.0), ("wait", 1.0))}


def short_kernels(n: int = 12, *, duration_s: float = 3e-6, gap_s: float | None = 6e-6) -> tuple[KernelSummary, ...]:
    """A call of ``n`` elementwise kernels of a few microseconds with host gaps between them."""
    return tuple(KernelSummary(name=f"k{i}", duration_s=duration_s, dram_bytes=8e6, grid_blocks=512,
                               kernel_class="latency_bound", gap_before_s=None if i == 0 else gap_s)
                 for i in range(n))


def unfused_kernels() -> tuple[KernelSummary, ...]:
    """Three memory-bound passes (e.g. add, scale, relu) over 64 MB tensors: 3 x 128 MB of traffic."""
    return tuple(KernelSummary(name=f"pass{i}", duration_s=40e-6, dram_bytes=128e6, grid_blocks=16384,
                               kernel_class="memory_bound", gap_before_s=None if i == 0 else 2e-6)
                 for i in range(3))
