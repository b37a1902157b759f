"""Launches seen by different tools matched up: the trace's launches paired with the ncu launches
that measured them, by kernel name."""

from __future__ import annotations

import re

from loopwise.kernels.profile.findings import KernelSummary


def names_match(a: str, b: str) -> bool:
    """Kernel names from different tools: ncu's function name vs the symbol in SASS or the trace."""
    return a == b or (len(a) > 3 and a in b) or (len(b) > 3 and b in a)


def base_name(name: str) -> str:
    """A kernel's function name without return type, namespaces, template or parameter lists: what
    ncu's demangling (``elementwise_kernel<128, 2, ...>``) and the trace's (``void
    at::native::elementwise_kernel<128, 2, ...>``) have in common."""
    head = re.split(r"[<(]", name.strip().removeprefix("void ").strip(), maxsplit=1)[0]
    return head.rsplit("::", 1)[-1].strip()


def pair_launches(summaries, measured) -> list:
    """For each traced launch, the ncu launch that measured it (or None): in order when both saw the
    same sequence of kernels (ncu and the trace cover the same call), else by a function name that
    is unique on both sides."""
    bases_t, bases_m = [base_name(s.name) for s in summaries], [base_name(m.name) for m in measured]
    if bases_t == bases_m:
        return list(measured)
    unique = {b for b in bases_m if bases_m.count(b) == 1 and bases_t.count(b) == 1}
    by_base = {b: m for b, m in zip(bases_m, measured) if b in unique}
    return [by_base.get(b) for b in bases_t]


def launch_summaries(traced, measured, classifications) -> tuple | None:
    """The trace's launches for the cross-kernel tools, with ncu's DRAM bytes and roofline class
    filled in where a measured launch pairs with them."""
    if traced is None:  # no trace: ncu's launches in order, without the host gaps between them
        return tuple(KernelSummary(name=m.name, duration_s=m.duration_s, dram_bytes=m.dram_bytes,
                                   grid_blocks=m.grid_blocks,
                                   kernel_class=getattr(classifications.get(m.name), "kernel_class", None))
                     for m in measured if m.duration_s) or None
    summaries = traced.summaries()
    out = []
    for s, m in zip(summaries, pair_launches(summaries, measured)):
        name = m.name if m is not None else next((n for n in classifications if names_match(n, s.name)), "")
        cls = classifications.get(name)
        update = {"kernel_class": cls.kernel_class if cls else None}
        if m is not None and m.dram_bytes is not None:
            update["dram_bytes"] = m.dram_bytes
        out.append(s.model_copy(update=update))
    return tuple(out)

