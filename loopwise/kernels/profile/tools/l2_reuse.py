"""Low L2 hit rate on a kernel whose working set fits in L2: data re-fetched from DRAM.

Why it matters: the H200's L2 holds 60 MiB. A kernel that touches less than that but reads the same
data several times should find it in L2 after the first read; a low hit rate then means the reads of
one datum are spread too far apart in time (programs that share inputs run at different moments, or
tiles too small to reuse what they load), and DRAM serves what L2 could have.

Evidence (ncu): ``lts__t_sector_hit_rate.pct`` (L2 sector hit rate), the working set (the problem's
byte budget ``hints.min_dram_bytes``, else the DRAM bytes read, an upper bound of what was touched),
and reuse: the bytes requested from L2 (``lts__t_sectors.sum`` x 32) against the working set, or the
DRAM bytes against the budget. Fires when the hit rate is below 50%, the working set fits
``DeviceFacts.l2_bytes`` and the data is requested 2x or more (or DRAM moves 1.5x the budget): a
streaming kernel that reads each byte once has a low hit rate with nothing to gain. Score: 0.6 times
the miss share, halved unless the kernel is memory-bound.

Metric names: ``lts__t_sector_hit_rate.pct`` and ``lts__t_sectors.sum`` are both present in the
recorded H200 fixtures (``tests/kernels/profile_fixtures/recorded/*/ncu.csv``).
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, ParameterMove, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import fmt_bytes, metric

HIT_RATE = "lts__t_sector_hit_rate.pct"
L2_SECTORS = "lts__t_sectors.sum"
SECTOR_BYTES = 32
MAX_HIT_PCT = 50.0
MIN_REUSE = 2.0
MIN_DRAM_EXCESS = 1.5
WEIGHT = 0.6


class L2ReuseTool(Tool):
    name = "l2_reuse"
    needs = frozenset({"ncu"})
    applies_to = frozenset({"memory_bound", "underutilized"})
    summary = "L2 hit rate below 50% on a re-read working set that fits in L2"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        assert inp.ncu is not None
        hit = metric(inp, HIT_RATE)
        if hit is None or hit >= MAX_HIT_PCT:
            return []
        budget = inp.hints.min_dram_bytes
        working_set = budget if budget else inp.ncu.dram_read_bytes
        if not working_set or working_set > inp.device.l2_bytes:
            return []
        evidence: dict[str, float | int | str | bool] = {
            "l2_hit_rate_pct": round(hit, 2), "working_set_bytes": working_set, "l2_bytes": inp.device.l2_bytes,
        }
        sectors = metric(inp, L2_SECTORS)
        reuse = None
        if sectors:
            reuse = sectors * SECTOR_BYTES / working_set
            evidence["l2_requested_over_working_set"] = round(reuse, 3)
        dram_excess = None
        if budget and inp.ncu.dram_bytes:
            dram_excess = inp.ncu.dram_bytes / budget
            evidence["dram_over_budget"] = round(dram_excess, 3)
        if not ((reuse is not None and reuse >= MIN_REUSE) or (dram_excess is not None and dram_excess >= MIN_DRAM_EXCESS)):
            return []
        memory = inp.classification is not None and inp.classification.kernel_class == "memory_bound"
        score = WEIGHT * (1 - hit / 100) * (1.0 if memory else 0.5)
        moves: list[Move] = [StructuralMove("reorder_blocks")]
        if inp.launch is not None and inp.launch.block is not None:
            moves.append(ParameterMove.of(block=inp.launch.block * 2))
        times = (f"requested {reuse:.1f}x over" if reuse is not None and reuse >= MIN_REUSE
                 else f"fetched from DRAM {dram_excess:.1f}x over")
        guidance = (f"Only {hit:.0f}% of L2 sectors hit although the {fmt_bytes(working_set)} working set fits in the "
                    f"{fmt_bytes(inp.device.l2_bytes)} L2 and is {times}, so order the programs (or enlarge the "
                    f"tiles) so data is reused while it is still in L2.")
        return [Finding.make(self.name, guidance, evidence, score, moves)]


TOOL = L2ReuseTool()
