"""Uncoalesced global accesses: more 32-byte sectors per warp request than the access width needs.

Why it matters: a warp's global load or store is one request to L1TEX, which fetches the 32-byte
sectors its 32 threads touch. Threads reading neighbouring 4-byte words touch 4 sectors (128 bytes);
a strided or scattered pattern touches up to 32, so most of each fetched sector is thrown away and
DRAM / L2 bandwidth is spent on bytes nobody uses.

Evidence (ncu), first choice: ``memory_l2_theoretical_sectors_global`` against
``memory_l2_theoretical_sectors_global_ideal`` (both in the recorded H200 full-set fixtures): the
sectors the accesses touched and the fewest that hold those bytes, whatever the access width. Fires
at 2x the ideal or more; score: ``1 - ideal / touched`` times the weights below.

Otherwise: ``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum`` /
``l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum`` (sectors per load request) and the ``_op_st``
pair for stores. The ideal is the access width in bytes (32 threads x W bytes / 32-byte sectors): 4
for 4-byte accesses, 16 for 16-byte vector accesses. The width comes from the SASS record when one is
given (most frequent global access width); otherwise 4-byte accesses are assumed and the score is
halved, since 8- or 16-byte vector accesses would look 2-4x "uncoalesced" under that assumption.
Fires when a direction runs at 2x its ideal or more. Score: the wasted share of fetched sectors
(``1 - ideal / measured``) times 0.8 on memory-bound kernels (0.5 otherwise).

Metric names: all six (the two theoretical sector counts and the ``_op_ld`` / ``_op_st`` sector and
request sums) are present in the recorded H200 fixtures
(``tests/kernels/profile_fixtures/recorded/*/ncu.csv``). NVIDIA's forum answer on sectors per request
(forums.developer.nvidia.com/t/understanding-l1-tex-cache-sectors-req/312884) gives the semantics:
1 sector for one active thread, up to 32 when each thread touches its own line. When a direction's
pair is missing that direction is skipped; with neither the tool gives no finding.
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import metric

SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum"
REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum"
# ncu's theoretical sector counts (full set, MemoryWorkloadAnalysis tables on an H200): the sectors
# the global accesses' addresses touch, and the fewest that hold the same bytes.
THEORETICAL = "memory_l2_theoretical_sectors_global"
THEORETICAL_IDEAL = "memory_l2_theoretical_sectors_global_ideal"
SECTOR_BYTES = 32
DEFAULT_WIDTH = 4
MIN_EXCESS = 2.0
WEIGHT_MEMORY = 0.8
WEIGHT_OTHER = 0.5


class UncoalescedTool(Tool):
    name = "uncoalesced_access"
    needs = frozenset({"ncu"})
    applies_to = frozenset({"memory_bound", "underutilized"})
    summary = "global sectors per request against the ideal for the access width"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        total, ideal = metric(inp, THEORETICAL), metric(inp, THEORETICAL_IDEAL)
        if total and ideal:
            return self._from_ideal(inp, total, ideal)
        width, assumed = self._width(inp)
        ideal = max(1.0, width * 32 / SECTOR_BYTES)
        worst: tuple[float, str, float, float] | None = None
        evidence: dict[str, float | int | str | bool] = {}
        for op in ("ld", "st"):
            sectors, requests = metric(inp, SECTORS.format(op=op)), metric(inp, REQUESTS.format(op=op))
            if sectors is None or not requests:
                continue  # not collected, or no requests of this kind: nothing to divide
            per_request = sectors / requests
            evidence[f"sectors_per_request_{op}"] = round(per_request, 3)
            evidence[f"requests_{op}"] = requests
            evidence[f"sectors_{op}"] = sectors
            if worst is None or per_request / ideal > worst[0]:
                worst = (per_request / ideal, op, per_request, sectors)
        if worst is None or worst[0] < MIN_EXCESS:
            return []
        excess, op, per_request, _ = worst
        evidence.update({"ideal_sectors_per_request": ideal, "access_bytes": width, "width_assumed": assumed,
                         "excess": round(excess, 3)})
        memory = inp.classification is not None and inp.classification.kernel_class == "memory_bound"
        score = (1 - 1 / excess) * (WEIGHT_MEMORY if memory else WEIGHT_OTHER) * (0.5 if assumed else 1.0)
        moves: list[Move] = [StructuralMove("coalesce_accesses")]
        if width < 16:
            moves.append(StructuralMove("vectorize_loads"))
        kind = "load" if op == "ld" else "store"
        assumption = "if the accesses are" if assumed else "for"
        guidance = (f"Each warp {kind} request fetches {per_request:.1f} sectors of 32 bytes where {ideal:.0f} "
                    f"would do {assumption} {width} bytes wide, so {1 - 1 / excess:.0%} of the fetched "
                    f"bytes are wasted and neighbouring threads should touch neighbouring addresses.")
        return [Finding.make(self.name, guidance, evidence, score, moves)]

    def _from_ideal(self, inp: ToolInput, total: float, ideal: float) -> list[Finding]:
        """ncu's own count of the sectors the addresses touched against the fewest that hold them:
        exact whatever the access width, so no width needs assuming."""
        excess = total / ideal
        if excess < MIN_EXCESS:
            return []
        per_request = {op: metric(inp, SECTORS.format(op=op)) / r for op in ("ld", "st")
                       if (r := metric(inp, REQUESTS.format(op=op))) and metric(inp, SECTORS.format(op=op))}
        evidence: dict[str, float | int | str | bool] = {
            "global_sectors": total, "ideal_global_sectors": ideal, "excess": round(excess, 3)}
        evidence.update({f"sectors_per_request_{op}": round(v, 3) for op, v in per_request.items()})
        memory = inp.classification is not None and inp.classification.kernel_class == "memory_bound"
        score = (1 - 1 / excess) * (WEIGHT_MEMORY if memory else WEIGHT_OTHER)
        worse = max(per_request, key=per_request.get) if per_request else None
        kind = {"ld": "loads", "st": "stores", None: "accesses"}[worse]
        guidance = (f"The kernel's global accesses touch {excess:.1f}x the 32-byte sectors their addresses need "
                    f"({total / 1e6:.3g}M against ncu's ideal {ideal / 1e6:.3g}M; worst: {kind}"
                    + (f", {per_request[worse]:.1f} sectors per request" if worse else "")
                    + f"), so {1 - 1 / excess:.0%} of the fetched bytes are wasted: neighbouring threads "
                    "should touch neighbouring addresses.")
        return [Finding.make(self.name, guidance, evidence, score, [StructuralMove("coalesce_accesses"),
                                                                            StructuralMove("vectorize_loads")])]

    @staticmethod
    def _width(inp: ToolInput) -> tuple[int, bool]:
        """The most frequent global access width in bytes from SASS, or 4 (assumed)."""
        if inp.sass is not None:
            counts: dict[int, int] = {}
            for table in (inp.sass.global_loads, inp.sass.global_stores):
                for width, n in table.items():
                    counts[width] = counts.get(width, 0) + n
            if counts:
                return max(counts, key=lambda w: (counts[w], w)), False
        return DEFAULT_WIDTH, True


TOOL = UncoalescedTool()
