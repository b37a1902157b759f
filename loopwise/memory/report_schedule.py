"""The report's schedule sections: time and energy, each group's loop nest, and its buffers and DMA
transfers, as an engineer implementing the plan reads them."""

from __future__ import annotations

from loopwise.core.report import Section
from loopwise.memory.schedule_loops import static_steps

MAX_ROWS = 400  # per table: a large model's transfers are many; the plan's JSON has them all


def time_section(plan: dict) -> Section:
    from loopwise.memory.plan_text import time_lines

    facts = {}
    t = plan.get("time")
    if t is not None:
        facts = {"time (ms, double buffered)": f"{t['seconds'] * 1e3:,.4f}",
                 "compute (ms)": f"{t['compute_seconds'] * 1e3:,.4f}",
                 "DRAM transfers (ms)": f"{t['transfer_seconds'] * 1e3:,.4f}",
                 "serial (ms)": f"{t['serial_seconds'] * 1e3:,.4f}",
                 "loads overlapped / waiting": f"{t['loads_overlapped']} / {t['loads_serialized']}",
                 "energy (mJ)": "not known for this target" if t["energy"] is None
                 else f"{t['energy']['joules'] * 1e3:,.4f} ({t['energy']['source']})"}
    rows = [] if t is None else [[r["operator"], f"{r['compute_seconds'] * 1e6:,.2f}",
                                  f"{r['transfer_seconds'] * 1e6:,.2f}", f"{r['roofline_seconds'] * 1e6:,.2f}",
                                  r["bound"]] for r in t["operators"][:MAX_ROWS]]
    return Section("Time and energy on the target", facts=facts, rows=rows,
                   columns=["operator", "compute µs", "transfer µs", "roofline µs", "bound"] if rows else [],
                   blocks=[("summary", "\n".join(time_lines(plan)))])


def _loops(loops: list[dict]) -> str:
    parts = []
    for loop in loops:
        if loop["trips"] == 1:
            parts.append(f"{loop['dim']} {loop['extent']}")
        else:
            via = f" [{loop['loop']}]" if "loop" in loop else ""
            parts.append(f"{loop['dim']} {loop['extent']} by {loop['tile']} x{loop['trips']}{via}")
    return " > ".join(parts)


def loop_nest_section(plan: dict) -> Section:
    rows = []
    for gi, group in enumerate(plan["schedule"]["groups"]):
        nest = group["loop_nest"]
        shared = " > ".join(f"{s['label']}: {s['extent']} by {s['size']} x{s['trips']}" for s in nest["loops"])
        if nest.get("state"):  # a key loop's online softmax: its running state, held per query block
            shared += f" (online softmax state: {', '.join(nest['state'])})"
        for op in nest["operators"]:
            rows.append([str(gi), nest["runs"], shared or "-", op["operator"], _loops(op["loops"])])
            if len(rows) >= MAX_ROWS:
                break
    return Section("Schedule: loop nests (outermost first; extent by tile size x trips)",
                   columns=["group", "runs", "shared loops", "operator", "its loops in order"], rows=rows)


def buffers_section(plan: dict) -> Section:
    rows = []
    for gi, group in enumerate(plan["schedule"]["groups"]):
        dma = {}
        for d in group["dma"]:
            dma.setdefault(d["step"], []).append(d)
        for step, loops in static_steps(group["steps"]):
            where = " > ".join(loop["loop"] for loop in loops) or "-"
            for tensor, nbytes, labels, offset, size in step["alloc"]:
                rows.append([step["id"], step["operator"] or "-", where, "allocate", tensor, f"{offset:,}",
                             f"{size:,}", f"{nbytes:,}" + (f" over {', '.join(labels)}" if labels else "")])
            for d in dma.get(step["id"], []):
                rows.append([step["id"], step["operator"] or "-", where, f"DMA {d['from']} -> {d['to']}", d["tensor"],
                             f"{d['offset']:,}", "", f"{d['bytes']:,}" + (f" over {', '.join(d['split'])}"
                                                                            if d["split"] else "")])
        if len(rows) >= MAX_ROWS:
            break
    note = "" if len(rows) < MAX_ROWS else f" (the first {MAX_ROWS} rows; the plan's JSON has them all)"
    return Section(f"Scratchpad buffers and DMA transfers, step by step{note}",
                   columns=["step", "operator", "in loops", "what", "tensor", "offset", "buffer bytes", "bytes"],
                   rows=rows[:MAX_ROWS])
