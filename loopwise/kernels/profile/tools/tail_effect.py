"""Tail effect (wave quantization): a grid that leaves SMs idle in its last wave, or never fills them.

Why it matters: the GPU runs a grid in waves of ``SMs x resident blocks per SM`` blocks. A grid of
1.1 waves takes as long as two full ones, with 45% of the GPU idle; a grid smaller than the SM
count never uses some SMs at all. Neither shows in the kernel's code; only grid size, residency and
SM count decide it.

Evidence: the grid from the launch, blocks per SM from the occupancy rules on the cubin's
registers / shared memory (:mod:`loopwise.kernels.profile.occupancy`), the device's SM count.
Efficiency: over several waves, ``waves / ceil(waves)``; within one wave, the fraction of SMs that
get a block. Fires when 15% or more of the GPU's time idles. Score: 0.8 times the idle fraction
(blocks of the last wave often run faster, with less contention, so not all of it is lost).
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, ParameterMove, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.occupancy import theoretical_occupancy, waves
from loopwise.kernels.profile.tool import Tool

MIN_IDLE = 0.15
WEIGHT = 0.8


class TailEffectTool(Tool):
    name = "tail_effect"
    needs = frozenset({"sass", "launch"})
    applies_to = frozenset({"compute_bound", "latency_bound", "underutilized"})
    summary = "grid size against SMs x resident blocks: partial last wave or idle SMs"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        k, launch = inp.sass, inp.launch
        assert k is not None and launch is not None
        if launch.warps is None or launch.grid_blocks is None:
            return []
        res = k.resources
        occ = theoretical_occupancy(inp.device, launch.warps, res.registers if res else None,
                                    res.shared_bytes if res else None)
        if occ.blocks_per_sm == 0:
            return []  # nothing is resident: the occupancy tool reports that
        w = waves(inp.device, launch.grid_blocks, occ.blocks_per_sm)
        idle = 1 - w.efficiency
        if idle < MIN_IDLE:
            return []
        sms = inp.device.sm_count
        evidence: dict[str, float | int | str | bool] = {
            "grid_blocks": w.grid_blocks, "sm_count": sms, "blocks_per_sm": occ.blocks_per_sm,
            "slots": w.slots, "waves": round(w.waves, 4), "full_waves": w.full_waves,
            "last_wave_fraction": round(w.last_wave_fraction, 4), "busy_sms": w.busy_sms,
            "efficiency": round(w.efficiency, 4),
        }
        moves: list[Move] = []
        if w.grid_blocks < sms:
            if inp.hints.matmul_shaped:
                moves.append(StructuralMove("split_k"))
            if launch.block is not None and launch.block >= 2:
                moves.append(ParameterMove.of(block=launch.block // 2))
            moves.append(StructuralMove("fuse_kernels"))
            guidance = (f"The grid of {w.grid_blocks} blocks gives work to only {w.busy_sms} of the {sms} SMs, "
                        f"so {idle:.0%} of the GPU idles, and more, smaller blocks (or split-K for a matmul) "
                        f"would use the rest.")
        else:
            moves.append(StructuralMove("persistent_kernel"))
            if launch.block is not None and launch.block >= 2:
                moves.append(ParameterMove.of(block=launch.block // 2))
            guidance = (f"The grid of {w.grid_blocks} blocks is {w.waves:.2f} waves of {w.slots} resident blocks "
                        f"({sms} SMs x {occ.blocks_per_sm} per SM), so its last wave is {w.last_wave_fraction:.0%} "
                        f"full and {idle:.0%} of the GPU's time idles, which a persistent loop or a block size "
                        f"giving whole waves would recover.")
        return [Finding.make(self.name, guidance, evidence, WEIGHT * idle, moves)]


TOOL = TailEffectTool()
