"""Uncoalesced global accesses: more 32-byte sectors per warp request than the access width needs.

Why it matters: a warp's global load or store is one request to L1TEX, which fetches the 32-byte
sectors its 32 threads touch. Threads reading neighbouring 4-byte words touch 4 sectors (128 bytes);
a strided or scattered pattern touches up to 32, so most of each fetched sector is thrown away and
DRAM / L2 bandwidth is spent on bytes nobody uses.

Evidence (ncu): ``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum`` /
``l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum`` (sectors per load request) and the ``_op_st``
pair for stores. The ideal is the access width in bytes (32 threads x W bytes / 32-byte sectors): 4
for 4-byte accesses, 16 for 16-byte vector accesses. The width comes from the SASS record when one is
given (most frequent global access width); otherwise 4-byte accesses are assumed and the score is
halved, since 8- or 16-byte vector accesses would look 2-4x "uncoalesced" under that assumption.
Fires when a direction runs at 2x its ideal or more. Score: the wasted share of fetched sectors
(``1 - ideal / measured``) times 0.8 on memory-bound kernels (0.5 otherwise).

Metric names: spelled as in public ncu scripts and NVIDIA's forum answer on sectors per request
(forums.developer.nvidia.com/t/understanding-l1-tex-cache-sectors-req/312884, which confirms the
semantics: 1 sector for one active thread, up to 32 when each thread touches its own line); the
exact names were not found in NVIDIA's documentation text through our search index: unconfirmed
names, to be checked against a recorded H200 fixture.
"""

from __future__ import annotations

from loopwise.kernels.profile.findings import Finding, Move, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import metric

SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum"
REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum"
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
        moves: list[Move] = ["coalesce_accesses"]
        if width < 16:
            moves.append("vectorize_loads")
        kind = "load" if op == "ld" else "store"
        assumption = "if the accesses are" if assumed else "for"
        guidance = (f"Each warp {kind} request fetches {per_request:.1f} sectors of 32 bytes where {ideal:.0f} "
                    f"would do {assumption} {width} bytes wide, so {1 - 1 / excess:.0%} of the fetched "
                    f"bytes are wasted and neighbouring threads should touch neighbouring addresses.")
        return [Finding.make(self.name, guidance, evidence, score, moves)]

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
