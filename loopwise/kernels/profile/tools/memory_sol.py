"""A memory-bound kernel far from the bandwidth ceiling, and its byte budget.

Why it matters: a kernel bound by DRAM bandwidth can only go as fast as its bytes at the copy
ceiling; below 80% of that (the classifier's at-roofline mark) the loads themselves are inefficient
(narrow, few in flight, partial waves), and when the kernel moves more bytes than the work needs,
even the ceiling is the wrong target: the bytes have to shrink (fusion, no re-reads).

Evidence: the roofline classification (class ``memory_bound`` on the memory side, fraction of speed
of light, achieved GB/s; the ceiling is achieved / fraction), the DRAM bytes ncu measured (or
achieved GB/s x time when ncu is absent), and the problem's byte budget ``hints.min_dram_bytes``
when given. Fires when the kernel is memory-bound on the memory side and not at the roofline.
Score: 0.8 times the share of the time that would go at the ceiling with the budgeted bytes
(``1 - fraction x min(1, budget / bytes)``).
"""

from __future__ import annotations

from loopwise.kernels.profile.classify import AT_ROOFLINE
from loopwise.kernels.moves import Move, ParameterMove, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import fmt_bytes

WEIGHT = 0.8
EXCESS_BYTES = 1.1  # moving 10% more than the budget is within what caches and padding explain


class MemorySolTool(Tool):
    name = "memory_far_from_roofline"
    generic = True
    needs = frozenset({"classification"})
    applies_to = frozenset({"memory_bound"})
    summary = "memory-bound kernel below 80% of the bandwidth ceiling, with bytes moved against the budget"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        c = inp.classification
        assert c is not None
        if c.kernel_class != "memory_bound" or c.bound != "memory" or c.at_roofline:
            return []
        if not c.achieved_gbs or c.fraction_of_sol <= 0 or c.fraction_of_sol >= AT_ROOFLINE:
            return []
        ceiling = c.achieved_gbs / c.fraction_of_sol
        time_s = c.sol_time_s / c.fraction_of_sol
        moved = inp.ncu.dram_bytes if inp.ncu is not None and inp.ncu.dram_bytes else c.achieved_gbs * 1e9 * time_s
        evidence: dict[str, float | int | str | bool] = {
            "achieved_gbs": round(c.achieved_gbs, 1), "ceiling_gbs": round(ceiling, 1),
            "fraction_of_sol": round(c.fraction_of_sol, 4), "bytes_moved": moved,
        }
        budget = inp.hints.min_dram_bytes
        excess = None
        if budget:
            excess = moved / budget
            evidence.update({"min_bytes": budget, "bytes_over_budget": round(excess, 3)})
        score = WEIGHT * (1 - c.fraction_of_sol * min(1.0, 1 / excess if excess else 1.0))
        moves: list[Move] = [StructuralMove("vectorize_loads")]
        if excess is not None and excess >= EXCESS_BYTES:
            moves.insert(0, StructuralMove("fuse_kernels"))
        block = inp.launch.block if inp.launch is not None else None
        if block is not None:
            moves.append(ParameterMove.of(block=block * 2))
        head = (f"The kernel reaches {c.achieved_gbs:.0f} of {ceiling:.0f} GB/s ({c.fraction_of_sol:.0%} of "
                f"its memory speed of light) while moving {fmt_bytes(moved)}")
        if excess is not None and excess >= EXCESS_BYTES:
            tail = (f", {excess:.1f}x the {fmt_bytes(budget)} the work needs, so cut the bytes first "
                    f"(fuse, read each input once) and then widen the loads.")
        elif budget:
            tail = (f", about the {fmt_bytes(budget)} the work needs, so the loads themselves are slow and "
                    f"wider (16-byte) accesses or more bytes per program should close the gap.")
        else:
            tail = ", so wider (16-byte) accesses or more bytes in flight per program should close the gap."
        return [Finding.make(self.name, head + tail, evidence, score, moves)]


TOOL = MemorySolTool()
