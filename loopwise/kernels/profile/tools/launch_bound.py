"""Launch-bound forward call: many short kernels whose host-side gaps dominate the time.

Why it matters: each kernel launch costs the host a few microseconds (Python, the framework's
dispatch, the driver). A call made of many kernels of a few microseconds each is paced by those
launches, not by the GPU: the GPU idles in the gaps. Capturing the launches in a CUDA graph removes
the per-launch host cost; fusing kernels removes launches outright.

Evidence: the per-kernel list ``ToolInput.kernels`` (durations, and the host gap before each kernel
when known). Fires with 3 or more kernels whose median duration is under 10 us and either the known
gaps make up 30% or more of the call's wall time, or, with no gap known, 10 or more such kernels (a
launch costs about 4 us of host time, ``LAUNCH_COST_S``, which then estimates the gaps; the score is
halved for the estimate). Score: the gap share of the wall time.
"""

from __future__ import annotations

import statistics

from loopwise.kernels.moves import StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import fmt_time

MIN_KERNELS = 3
MIN_KERNELS_GAPS_UNKNOWN = 10
SHORT_S = 10e-6
MIN_GAP_SHARE = 0.3
LAUNCH_COST_S = 4e-6


class LaunchBoundTool(Tool):
    name = "launch_bound"
    needs = frozenset({"kernels"})
    applies_to = frozenset({"latency_bound"})
    summary = "many short kernels in one call, with host launch gaps dominating its time"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        kernels = inp.kernels or ()
        if len(kernels) < MIN_KERNELS:
            return []
        median = statistics.median(k.duration_s for k in kernels)
        if median >= SHORT_S:
            return []
        gpu = sum(k.duration_s for k in kernels)
        known = [k.gap_before_s for k in kernels if k.gap_before_s is not None]
        if known:
            gaps, estimated = sum(known), False
        elif len(kernels) >= MIN_KERNELS_GAPS_UNKNOWN:
            gaps, estimated = LAUNCH_COST_S * (len(kernels) - 1), True
        else:
            return []
        share = gaps / (gaps + gpu) if gaps + gpu > 0 else 0.0
        if share < MIN_GAP_SHARE:
            return []
        evidence: dict[str, float | int | str | bool] = {
            "kernels": len(kernels), "median_duration_s": median, "gpu_time_s": gpu, "gap_time_s": gaps,
            "gap_share": round(share, 4), "gaps_estimated": estimated,
        }
        source = f"an estimated {fmt_time(gaps)}" if estimated else fmt_time(gaps)
        guidance = (f"The call launches {len(kernels)} kernels of median {fmt_time(median)}, and {source} of host "
                    f"launch gaps make up {share:.0%} of its {fmt_time(gaps + gpu)}, so capture it in a CUDA graph "
                    f"or fuse the kernels.")
        score = share * (0.5 if estimated else 1.0)
        return [Finding.make(self.name, guidance, evidence, score, [StructuralMove("use_cuda_graphs"),
                                                                            StructuralMove("fuse_kernels")])]


TOOL = LaunchBoundTool()
