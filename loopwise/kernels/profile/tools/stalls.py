"""Stall-reason breakdown: what the warps of the kernel wait on most.

Why it matters: when no warp of a scheduler is eligible, the cycle issues nothing, and the reason the
warps are stalled names the fix: waiting on global memory asks for more bytes in flight, waiting at
barriers for less synchronization, a throttled math pipe for another instruction mix.

Evidence (ncu), the first family present of:

1. ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``: warps stalled per issued
   instruction, by reason. Confirmed: NVIDIA's own ``CPIStall`` rule of the Nsight Compute 2025.1
   sections requests ``smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio`` and
   ``smsp__average_warp_latency_per_inst_issued.ratio`` (the section file, as packaged in
   nsight-compute-2025.1.1 ``sections/CPIStall.py``).
   The recorded H200 fixtures (``tests/kernels/profile_fixtures/recorded/*/ncu.csv``) carry this
   family for every reason.
2. ``smsp__average_warp_latency_issue_stalled_<reason>.ratio`` (or ``.pct``): cycles stalled by
   reason, as spelled in public ncu scripts. The recorded H200 fixtures do not have this family
   (they have only ``smsp__average_warp_latency_per_inst_issued.ratio``), so on that device it is
   never the one read; where neither it nor the first family is present, the third is.
3. ``smsp__pcsamp_warps_issue_stalled_<reason>``: PC-sampling counts by reason (the ``_not_issued``
   variants are skipped); present in the recorded H200 fixtures.

When no family is present the tool gives no finding.

``selected`` (the warp issued) is not a stall and is left out. Shares are of the sum over reasons.
Fires when the top reason holds 30% or more and is not ``not_selected`` (ready warps passed over
because another issued: the scheduler is busy, which is not a stall to fix). Score: 0.5 times the
top reason's share (stalls overlap with useful issue, so not all of it is time), times the
kernel's headroom to its speed of light (``1 - fraction_of_sol``) when it is classified.
"""

from __future__ import annotations

import re

from loopwise.kernels.moves import Move, ParameterMove, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool

FAMILIES = (
    re.compile(r"^smsp__average_warps_issue_stalled_([a-z0-9_]+)_per_issue_active\.ratio$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_([a-z0-9_]+)\.(?:ratio|pct)$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_([a-z0-9_]+)$"),
)
MIN_SHARE = 0.3
WEIGHT = 0.5
NOT_STALLS = {"selected"}

MEANING = {
    "long_scoreboard": "waiting on global or local memory (an L1TEX load result)",
    "barrier": "waiting at a block-wide barrier (__syncthreads / tl.debug_barrier) for the other warps",
    "math_pipe_throttle": "waiting for a busy math pipe (one pipe oversubscribed by the instruction mix)",
    "mio_throttle": "waiting for the memory-input/output queue (shared memory, special math, branches) to drain",
    "short_scoreboard": "waiting on a shared-memory or special-math (MUFU) result",
    "wait": "waiting out a fixed instruction latency (dependent arithmetic back to back)",
    "not_selected": "ready but passed over because another warp issued",
    "lg_throttle": "waiting for the local/global memory queue to drain (too many narrow memory instructions)",
    "membar": "waiting at a memory barrier (fence)",
    "branch_resolving": "waiting for a branch target to resolve",
    "dispatch_stall": "waiting on the dispatcher",
    "no_instruction": "waiting for instructions (instruction cache miss)",
    "drain": "waiting for memory stores to drain at exit",
    "sleeping": "sleeping (nanosleep or a yield)",
    "tex_throttle": "waiting for the texture queue to drain",
    "imc_miss": "waiting on an immediate constant cache miss",
    "gmma": "waiting on a warpgroup MMA (wgmma) to complete",
}


class StallsTool(Tool):
    name = "stall_reasons"
    generic = True
    needs = frozenset({"ncu"})
    applies_to = frozenset({"compute_bound", "latency_bound", "underutilized"})
    summary = "top two warp stall reasons with their shares and plain-language meaning"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        assert inp.ncu is not None
        stalls = self._stalls(inp.ncu.raw)
        total = sum(stalls.values())
        if total <= 0:
            return []
        ranked = sorted(stalls.items(), key=lambda kv: (-kv[1], kv[0]))
        (top, top_value), second = ranked[0], (ranked[1] if len(ranked) > 1 else None)
        share = top_value / total
        if top == "not_selected" or share < MIN_SHARE:
            return []
        evidence: dict[str, float | int | str | bool] = {"top_reason": top, "top_share": round(share, 4)}
        text = f"{top} ({share:.0%}, {MEANING.get(top, 'see the Nsight Compute stall reference')})"
        if second is not None and second[1] > 0:
            second_share = second[1] / total
            evidence.update({"second_reason": second[0], "second_share": round(second_share, 4)})
            text += f" and {second[0]} ({second_share:.0%}, {MEANING.get(second[0], 'see the Nsight Compute stall reference')})"
        evidence.update({f"stall_{reason}": round(value / total, 4) for reason, value in ranked[:6]})
        guidance = f"Warps stall mostly on {text}, so {self._advice(top)}."
        # Stalls cost time only up to the kernel's distance from its speed of light: a streaming
        # kernel at the DRAM roofline stalls on memory by design, and no fewer stalls make it faster.
        headroom = 1.0
        if inp.classification is not None:
            headroom = min(1.0, max(0.0, 1.0 - inp.classification.fraction_of_sol))
            evidence["headroom_to_sol"] = round(headroom, 4)
        return [Finding.make(self.name, guidance, evidence, WEIGHT * share * headroom, self._moves(top, inp))]

    @staticmethod
    def _stalls(raw) -> dict[str, float]:
        """Stall value by reason, from the first metric family that is present."""
        for family in FAMILIES:
            found: dict[str, float] = {}
            for name, value in raw.items():
                match = family.match(name)
                if match is None or value is None or value < 0:
                    continue
                reason = match.group(1)
                if reason in NOT_STALLS or reason.endswith("_not_issued"):
                    continue
                found[reason] = found.get(reason, 0.0) + value
            if found:
                return found
        return {}

    @staticmethod
    def _advice(reason: str) -> str:
        return {
            "long_scoreboard": "keep more loads in flight (wider loads, more warps, loads issued earlier)",
            "barrier": "synchronize less often or with fewer warps per block",
            "math_pipe_throttle": "move the work to another pipe (tensor cores for products) or balance the mix",
            "mio_throttle": "issue fewer, wider shared-memory accesses",
            "short_scoreboard": "make shared-memory accesses conflict-free and fewer",
            "wait": "interleave independent work between dependent instructions",
            "lg_throttle": "issue fewer, wider global accesses",
        }.get(reason, "look at the source lines ncu attributes this stall to")

    @staticmethod
    def _moves(reason: str, inp: ToolInput) -> list[Move]:
        warps = inp.launch.warps if inp.launch is not None else None
        block = inp.launch.block if inp.launch is not None else None
        moves: list[Move] = []
        if reason == "long_scoreboard":
            moves.append(StructuralMove("vectorize_loads"))
            if warps is not None and warps * 2 <= 16:
                moves.append(ParameterMove.of(warps=warps * 2))
        elif reason == "barrier":
            if warps is not None and warps >= 2:
                moves.append(ParameterMove.of(warps=warps // 2))
        elif reason == "math_pipe_throttle":
            if inp.hints.matmul_shaped:
                moves.append(StructuralMove("use_tensor_cores"))
        elif reason in ("mio_throttle", "lg_throttle"):
            moves.append(StructuralMove("vectorize_loads"))
        elif reason == "short_scoreboard":
            moves.append(StructuralMove("swizzle_shared_memory"))
        elif reason == "wait" and block is not None:
            moves.append(ParameterMove.of(block=block * 2))
        return moves


TOOL = StallsTool()
