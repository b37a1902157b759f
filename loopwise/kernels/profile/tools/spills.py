"""Register spills: local-memory loads and stores the compiler added because registers ran out.

Why it matters: a spilled value lives in local memory, which is off-chip memory behind L1. Every
``LDL`` / ``STL`` is a memory round trip where a register read would have cost nothing, and the
spill traffic competes with the kernel's own loads for L1 and bandwidth.

Evidence: static ``LDL`` / ``STL`` counts from SASS and the spill bytes ptxas reported.
Score: the larger of twice the share of local-memory instructions in the code (a local access costs
several ALU instructions' time even on an L1 hit) and spill bytes over 8 KB per thread, capped at
0.95; any spill is at least a low finding (0.1).
"""

from __future__ import annotations

from loopwise.kernels.profile.findings import Finding, Move, ToolInput
from loopwise.kernels.profile.tool import Tool

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
        score = min(MAX_SCORE, max(MIN_SCORE, 2 * share, spill_bytes / SPILL_BYTES_SCALE))
        registers = res.registers if res else None
        evidence: dict[str, float | int | str | bool] = {
            "local_loads": k.local_loads, "local_stores": k.local_stores, "instructions": k.instructions,
            "local_share": round(share, 4), "spill_bytes": spill_bytes,
            "local_load_bytes": k.local_load_bytes, "local_store_bytes": k.local_store_bytes,
        }
        if registers is not None:
            evidence["registers_per_thread"] = registers
        moves: list[Move] = ["reduce_registers"]
        launch = inp.launch
        if launch is not None and launch.warps is not None and launch.warps * 2 <= 16:
            moves.append({"warps": launch.warps * 2})  # the same tile over more threads: fewer values each
        if launch is not None and launch.block is not None and launch.block >= 2:
            moves.append({"block": launch.block // 2})
        at = f" at {registers} registers per thread" if registers is not None else ""
        amount = f" and {spill_bytes / 1024:.1f} KB of spill traffic per thread" if spill_bytes else ""
        guidance = (f"The kernel spills registers to local memory{at}: {k.local_loads} LDL and {k.local_stores} STL "
                    f"instructions ({share:.0%} of its {k.instructions}){amount}, so cut the live values per "
                    f"thread with a smaller tile, more warps per tile or a higher register cap.")
        return [Finding.make(self.name, guidance, evidence, score, moves)]


TOOL = SpillsTool()
