"""Register spills: local-memory loads and stores the compiler added because registers ran out.

Why it matters: a spilled value lives in local memory, which is off-chip memory behind L1. Every
``LDL`` / ``STL`` is a memory round trip where a register read would have cost nothing, and the
spill traffic competes with the kernel's own loads for L1 and bandwidth.

Evidence: static ``LDL`` / ``STL`` counts from SASS, the spill bytes ptxas reported (or the stack
frame, which holds the spill slots, when ptxas was not asked), and, when ncu ran, the local sectors
through L1 (``l1tex__t_sectors_pipe_lsu_mem_local_op_{ld,st}.sum``) against local plus global ones.
Score: the largest of twice the share of local-memory instructions in the code (a local access costs
several ALU instructions' time even on an L1 hit), spill bytes over 8 KB per thread, and the local
share of the L1 sector traffic, capped at 0.95; any spill is at least a low finding (0.1).
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, ParameterMove, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import metric

LOCAL_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_local_op_{op}.sum"
GLOBAL_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum"
SPILL_BYTES_SCALE = 8192
MIN_SCORE = 0.1
MAX_SCORE = 0.95


class SpillsTool(Tool):
    name = "register_spills"
    needs = frozenset({"sass"})
    applies_to = frozenset({"memory_bound", "compute_bound", "latency_bound", "underutilized"})
    summary = "local-memory loads/stores from register spills"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        k = inp.sass
        assert k is not None
        res = k.resources
        spill_bytes = ((res.spill_store_bytes or 0) + (res.spill_load_bytes or 0)) if res else 0
        local = k.local_loads + k.local_stores
        if local == 0 and spill_bytes == 0:
            return []
        share = local / k.instructions if k.instructions else 0.0
        traffic = self._local_traffic_share(inp)
        score = min(MAX_SCORE, max(MIN_SCORE, 2 * share, spill_bytes / SPILL_BYTES_SCALE, traffic or 0.0))
        registers = res.registers if res else None
        evidence: dict[str, float | int | str | bool] = {
            "local_loads": k.local_loads, "local_stores": k.local_stores, "instructions": k.instructions,
            "local_share": round(share, 4), "spill_bytes": spill_bytes,
            "local_load_bytes": k.local_load_bytes, "local_store_bytes": k.local_store_bytes,
        }
        if res is not None and res.stack_bytes:
            evidence["stack_bytes_per_thread"] = res.stack_bytes  # the spill slots when ptxas was not asked
        if traffic is not None:
            evidence["local_sector_share"] = round(traffic, 4)
        if registers is not None:
            evidence["registers_per_thread"] = registers
        moves: list[Move] = [StructuralMove("reduce_registers")]
        launch = inp.launch
        if launch is not None and launch.warps is not None and launch.warps * 2 <= 16:
            moves.append(ParameterMove.of(warps=launch.warps * 2))  # the same tile over more threads: fewer values each
        if launch is not None and launch.block is not None and launch.block >= 2:
            moves.append(ParameterMove.of(block=launch.block // 2))
        at = f" at {registers} registers per thread" if registers is not None else ""
        amount = f" and {spill_bytes / 1024:.1f} KB of spill traffic per thread" if spill_bytes else ""
        if traffic is not None:
            amount += f"; local memory is {traffic:.0%} of the sectors the kernel moved through L1 when run"
        guidance = (f"The kernel spills registers to local memory{at}: {k.local_loads} LDL and {k.local_stores} STL "
                    f"instructions ({share:.0%} of its {k.instructions}){amount}, so cut the live values per "
                    f"thread with a smaller tile, more warps per tile or a higher register cap.")
        return [Finding.make(self.name, guidance, evidence, score, moves)]

    @staticmethod
    def _local_traffic_share(inp: ToolInput) -> float | None:
        """Local (spill) sectors over local plus global sectors through L1, as ncu counted them when
        the kernel ran; ``None`` without those counters."""
        local = [metric(inp, LOCAL_SECTORS.format(op=op)) for op in ("ld", "st")]
        global_ = [metric(inp, GLOBAL_SECTORS.format(op=op)) for op in ("ld", "st")]
        if any(v is None for v in local + global_):
            return None
        total = sum(local) + sum(global_)
        return sum(local) / total if total > 0 else None


TOOL = SpillsTool()
