"""Narrow global accesses: loads and stores that move fewer than 16 bytes per thread.

Why it matters: one 128-bit access per thread moves a warp's 512 bytes with one instruction; the
same bytes in 32-bit accesses take four instructions, four times the load/store-unit issue slots
and more in-flight requests to hide the same latency. A kernel made only of narrow accesses is
usually either missing alignment / contiguity information (the compiler could not prove 16-byte
alignment) or strided, where the addresses of a warp are not even contiguous.

Evidence: the per-width histograms of global loads, stores and ``cp.async`` copies in SASS.
Fires when at least 2 accesses and a quarter of all global accesses are narrow. Score: 0.4 times
the narrow fraction (vectorizing rarely wins more than ~1.5x on its own), times 1.5 for a kernel
classified memory-bound and 0.5 for a compute-bound one.
"""

from __future__ import annotations

from collections import Counter

from loopwise.kernels.moves import StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool

WIDE_BYTES = 16
MIN_FRACTION = 0.25
MIN_NARROW = 2
BASE_SCORE = 0.4
CLASS_FACTOR = {"memory_bound": 1.5, "compute_bound": 0.5}


class NarrowAccessesTool(Tool):
    name = "narrow_accesses"
    needs = frozenset({"sass"})
    applies_to = frozenset({"memory_bound", "latency_bound", "underutilized"})
    summary = "global loads/stores narrower than 128 bits per thread"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        k = inp.sass
        assert k is not None
        widths: Counter[int] = Counter()
        for histogram in (k.global_loads, k.global_stores, k.async_copies):
            widths.update(histogram)
        total = sum(widths.values())
        narrow = sum(n for w, n in widths.items() if w < WIDE_BYTES)
        if total == 0 or narrow < MIN_NARROW or narrow / total < MIN_FRACTION:
            return []
        fraction = narrow / total
        factor = CLASS_FACTOR.get(inp.classification.kernel_class, 1.0) if inp.classification else 1.0
        score = BASE_SCORE * fraction * factor
        evidence: dict[str, float | int | str | bool] = {
            "narrow_accesses": narrow, "global_accesses": total, "narrow_fraction": round(fraction, 4),
            "narrow_loads": sum(n for w, n in k.global_loads.items() if w < WIDE_BYTES),
            "narrow_stores": sum(n for w, n in k.global_stores.items() if w < WIDE_BYTES),
            "narrow_async_copies": sum(n for w, n in k.async_copies.items() if w < WIDE_BYTES),
        }
        evidence.update({f"accesses_{w}_bytes": n for w, n in sorted(widths.items())})
        mix = ", ".join(f"{n} x {w} B" for w, n in sorted(widths.items()))
        guidance = (f"{narrow} of the kernel's {total} global accesses ({fraction:.0%}) move fewer than "
                    f"{WIDE_BYTES} bytes per thread ({mix}), so make each thread load and store 16-byte "
                    f"vectors from aligned, contiguous addresses and make strided accesses coalesced.")
        return [Finding.make(self.name, guidance, evidence, score, [StructuralMove("vectorize_loads"),
                                                                            StructuralMove("coalesce_accesses")])]


TOOL = NarrowAccessesTool()
