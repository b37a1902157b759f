"""A plan's time, energy and placement in sentences, for the terminal and the HTML report."""

from __future__ import annotations


def _ms(seconds: float) -> str:
    """A duration in the unit that reads best: s, ms or µs."""
    if seconds >= 1:
        return f"{seconds:,.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:,.3f} ms"
    return f"{seconds * 1e6:,.3f} µs"


def time_lines(data: dict) -> list[str]:
    """What the plan's JSON says about its time, energy, objectives and buffer placement."""
    lines = []
    planned = data.get("planned_capacity_bytes")
    capacity = data["schedule"]["capacity_bytes"]
    if planned and planned < capacity:
        lines.append(f"planned for {planned:,} of the {capacity:,} scratchpad bytes: at the full capacity the "
                     "buffers fit by bytes but not by offsets (first fit and largest first both fragment)")
    t = data.get("time")
    if t is None:
        lines.append("time: the target gives no compute throughput (add a compute section to its file)")
        return lines
    lines.append(f"time {_ms(t['seconds'])} with double buffering ({t['loads_overlapped']} loads overlap the "
                 f"compute before them, {t['loads_serialized']} wait); compute {_ms(t['compute_seconds'])}, DRAM "
                 f"transfers {_ms(t['transfer_seconds'])}, serial {_ms(t['serial_seconds'])}")
    e = t.get("energy")
    lines.append("energy: the target gives no energy per byte" if e is None else
                 f"energy {e['joules'] * 1e3:,.3f} mJ (DRAM {e['dram_joules'] * 1e3:,.3f} mJ, scratchpad "
                 f"{e['scratchpad_joules'] * 1e3:,.3f} mJ; {e['source']})")
    o = data.get("objectives")
    if o is not None:
        both = (f"plan {_ms(o['plan_seconds'])} / {o['plan_bytes'] / 1e6:,.2f} MB, layer by layer "
                f"{_ms(o['layer_by_layer_seconds'])} / {o['layer_by_layer_bytes'] / 1e6:,.2f} MB")
        if o["agree"]:
            lines.append(f"time and traffic agree: the {o['time_optimal']} candidate is best by both ({both})")
        else:
            lines.append(f"time and traffic disagree: the {o['traffic_optimal']} candidate moves the fewest bytes, "
                         f"the {o['time_optimal']} candidate runs fastest ({both})")
    return lines
