"""Warp divergence: warp instructions executed by fewer than all 32 threads.

Why it matters: a warp issues one instruction for all its threads; threads on the other side of a
divergent branch (or past the end of a partial block) are masked off, and the work of the masked
lanes is lost. With 16 active threads on average, half the issue and ALU throughput is wasted.

Evidence (ncu): ``smsp__thread_inst_executed_per_inst_executed.ratio``, the average threads active
per executed warp instruction (32 = no divergence); NVIDIA's forum explanation of
``smsp__thread_inst_executed`` vs ``smsp__inst_executed``
(forums.developer.nvidia.com/t/inst-executed-and-thread-inst-executed/154021) confirms what the
ratio measures: fewer than 32 when the block is not a multiple of 32 threads, threads exited, or
threads diverged. When it is missing, ``smsp__sass_average_branch_targets_threads_uniform.pct``
(share of branches all threads of a warp take the same way) stands in. Fires below 24 active threads
(75%), or below 75% uniform branches. Score: 0.7 times the idle lane share.

Metric names: both are present in the recorded H200 fixtures
(``tests/kernels/profile_fixtures/recorded/*/ncu.csv``). With neither, the tool gives no finding.
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import metric

ACTIVE_THREADS = "smsp__thread_inst_executed_per_inst_executed.ratio"
UNIFORM_BRANCHES = "smsp__sass_average_branch_targets_threads_uniform.pct"
MIN_ACTIVE = 24.0
MIN_UNIFORM_PCT = 75.0
WEIGHT = 0.7


class DivergenceTool(Tool):
    name = "warp_divergence"
    needs = frozenset({"ncu"})
    applies_to = frozenset({"compute_bound", "latency_bound", "underutilized"})
    summary = "average active threads per warp instruction below 24 of 32"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        assert inp.ncu is not None
        warp = inp.device.warp_size
        active, uniform = metric(inp, ACTIVE_THREADS), metric(inp, UNIFORM_BRANCHES)
        evidence: dict[str, float | int | str | bool] = {}
        if uniform is not None:
            evidence["uniform_branches_pct"] = round(uniform, 2)
        block = inp.ncu.block_threads or (inp.launch.threads if inp.launch is not None else None)
        partial = block is not None and block % warp != 0
        if block is not None:
            evidence["block_threads"] = block
        if active is not None and active > 0:
            if active >= MIN_ACTIVE:
                return []
            idle = 1 - min(active, warp) / warp
            evidence.update({"active_threads_per_instruction": round(active, 2), "idle_lane_share": round(idle, 4)})
            why = (f"a block of {block} threads leaves its last warp partly empty and branches diverge" if partial
                   else "threads of a warp take different branches or exit early")
            guidance = (f"Warp instructions run with {active:.1f} of {warp} threads active on average, so "
                        f"{idle:.0%} of the issue slots' lanes idle because {why}.")
        elif uniform is not None:
            if uniform >= MIN_UNIFORM_PCT:
                return []
            idle = (100 - uniform) / 100 / 2  # a divergent branch runs both sides: about half the lanes idle
            evidence["idle_lane_share_estimate"] = round(idle, 4)
            guidance = (f"Only {uniform:.0f}% of branches are taken the same way by all threads of a warp, so "
                        f"divergent paths serialize and regrouping the work per warp would recover them.")
        else:
            return []
        moves: list[Move] = [StructuralMove("uniform_branches")]
        return [Finding.make(self.name, guidance, evidence, WEIGHT * idle, moves)]


TOOL = DivergenceTool()
