"""Low theoretical occupancy, and the resource that limits it.

Why it matters: an SM hides memory and pipeline latency by switching between resident warps. Below
about half of the 64 warps an SM can hold, a kernel that waits on memory (or on dependent
instructions) has too few other warps to switch to; the Hopper tuning guide's occupancy section
names registers per thread and shared memory per block as the usual limits.

Evidence: registers per thread and shared memory per block from the cubin (SASS record) and warps
per block from the launch, run through the CUDA occupancy rules
(:func:`loopwise.kernels.profile.occupancy.theoretical_occupancy`); achieved occupancy from ncu
when present. Fires below 50% theoretical occupancy. Score: 0.6 times the shortfall from 50%
(``1 - occupancy / 0.5``), halved for kernels on tensor cores (wgmma pipelines keep the SM busy
with few warps) and for compute-bound kernels; a block that does not fit at all scores 1.0.
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, ParameterMove, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.occupancy import Occupancy, theoretical_occupancy
from loopwise.kernels.profile.tool import Tool

TARGET = 0.5
WEIGHT = 0.6
DISCOUNT = 0.5


class OccupancyTool(Tool):
    name = "low_occupancy"
    needs = frozenset({"sass", "launch"})
    applies_to = frozenset({"memory_bound", "latency_bound", "underutilized"})
    summary = "theoretical occupancy below 50%, with its limiter (registers, shared memory, warps, blocks)"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        k, launch = inp.sass, inp.launch
        assert k is not None and launch is not None
        warps = launch.warps
        if warps is None:
            return []
        res = k.resources
        occ = theoretical_occupancy(inp.device, warps, res.registers if res else None,
                                    res.shared_bytes if res else None)
        if occ.occupancy >= TARGET:
            return []
        evidence: dict[str, float | int | str | bool] = {
            "occupancy": round(occ.occupancy, 4), "warps_per_sm": occ.warps_per_sm,
            "max_warps_per_sm": inp.device.max_warps_per_sm, "blocks_per_sm": occ.blocks_per_sm,
            "warps_per_block": warps, "limiter": occ.limiter,
        }
        evidence.update({f"blocks_allowed_by_{name}": n for name, n in occ.limits.items() if n is not None})
        if occ.registers_per_thread is not None:
            evidence["registers_per_thread"] = occ.registers_per_thread
        if occ.shared_bytes_per_block is not None:
            evidence["shared_bytes_per_block"] = occ.shared_bytes_per_block
        if inp.ncu is not None and inp.ncu.occupancy_pct is not None:
            evidence["achieved_occupancy_pct"] = inp.ncu.occupancy_pct
        if occ.blocks_per_sm == 0:
            score = 1.0
        else:
            score = WEIGHT * (1 - occ.occupancy / TARGET)
            if k.tensor_core_instructions > 0:
                score *= DISCOUNT
            if inp.classification is not None and inp.classification.kernel_class == "compute_bound":
                score *= DISCOUNT
        guidance = (f"Only {occ.warps_per_sm} of {inp.device.max_warps_per_sm} warps ({occ.occupancy:.0%}) fit "
                    f"on an SM because {self._why(occ, inp.device.max_warps_per_sm)}, so {self._advice(occ)}.")
        return [Finding.make(self.name, guidance, evidence, score, self._moves(occ, launch.block, warps))]

    @staticmethod
    def _why(occ: Occupancy, max_warps: int) -> str:
        blocks = occ.blocks_per_sm
        if occ.limiter == "registers":
            return (f"{occ.registers_per_thread} registers per thread allow {blocks} blocks of "
                    f"{occ.warps_per_block} warps")
        if occ.limiter == "shared":
            return f"{occ.shared_bytes_per_block} bytes of shared memory per block allow {blocks} blocks"
        if occ.limiter == "warps":
            return f"blocks of {occ.warps_per_block} warps leave only {blocks} per SM within {max_warps} warps"
        return f"the SM holds at most {blocks} blocks and each has only {occ.warps_per_block} warps"

    @staticmethod
    def _advice(occ: Occupancy) -> str:
        return {"registers": "use fewer registers per thread (smaller tile, fewer live values)",
                "shared": "use less shared memory per block (smaller tile, fewer pipeline stages)",
                "warps": "use blocks whose warp count divides the SM's evenly",
                "blocks": "put more warps in each block"}[occ.limiter]

    @staticmethod
    def _moves(occ: Occupancy, block: int | None, warps: int) -> list[Move]:
        moves: list[Move] = []
        if occ.limiter == "registers":
            moves.append(StructuralMove("reduce_registers"))
        elif occ.limiter == "shared":
            moves.append(StructuralMove("reduce_shared_memory"))
        elif occ.limiter == "blocks" and warps * 2 <= 16:
            moves.append(ParameterMove.of(warps=warps * 2))
        if occ.limiter in ("registers", "shared") and block is not None and block >= 2:
            moves.append(ParameterMove.of(block=block // 2))
        return moves


TOOL = OccupancyTool()
