"""Redundant passes over memory across the kernels of one forward call: fusion candidates.

Why it matters: when a forward call runs as several memory-bound kernels, each one reads its inputs
from DRAM and writes its outputs back, so intermediates make a round trip the fused computation
would keep on chip. The sum of their DRAM bytes against the fewest bytes the whole problem needs
says how much of the traffic fusion can remove.

Evidence: the per-kernel list ``ToolInput.kernels`` (DRAM bytes, duration, roofline class) and the
problem's byte budget ``hints.min_dram_bytes``; without the budget the tool stays silent (it cannot
tell redundant bytes from necessary ones). Kernels count as memory-bound when classified so; when no
kernel carries a class, every kernel with measured bytes counts. Fires with 2 or more such kernels
whose summed bytes exceed the budget by 1.5x or more. Score: 0.8 times the redundant share of the
bytes, times the share of the call's GPU time those kernels take.
"""

from __future__ import annotations

from loopwise.kernels.moves import StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import fmt_bytes

MIN_KERNELS = 2
MIN_EXCESS = 1.5
WEIGHT = 0.8


class RedundantPassesTool(Tool):
    name = "redundant_passes"
    needs = frozenset({"kernels"})
    applies_to = frozenset({"memory_bound", "latency_bound", "underutilized"})
    summary = "memory-bound kernels of one call moving more DRAM bytes than the problem needs"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        kernels = inp.kernels or ()
        budget = inp.hints.min_dram_bytes
        if not budget or not kernels:
            return []
        classified = any(k.kernel_class is not None for k in kernels)
        memory = [k for k in kernels if k.dram_bytes is not None
                  and (k.kernel_class == "memory_bound" if classified else True)]
        if len(memory) < MIN_KERNELS:
            return []
        moved = sum(k.dram_bytes or 0.0 for k in memory)
        excess = moved / budget
        if excess < MIN_EXCESS:
            return []
        total_time = sum(k.duration_s for k in kernels)
        memory_time = sum(k.duration_s for k in memory)
        time_share = memory_time / total_time if total_time > 0 else 1.0
        score = WEIGHT * (1 - 1 / excess) * time_share
        evidence: dict[str, float | int | str | bool] = {
            "memory_bound_kernels": len(memory), "kernels": len(kernels), "bytes_moved": moved,
            "min_bytes": budget, "bytes_over_budget": round(excess, 3),
            "memory_bound_time_share": round(time_share, 4),
        }
        guidance = (f"The call's {len(memory)} memory-bound kernels move {fmt_bytes(moved)} of DRAM traffic, "
                    f"{excess:.1f}x the {fmt_bytes(budget)} the problem needs, so fusing them would keep the "
                    f"intermediates on chip and save up to {1 - 1 / excess:.0%} of those bytes.")
        return [Finding.make(self.name, guidance, evidence, score, [StructuralMove("fuse_kernels")])]


TOOL = RedundantPassesTool()
