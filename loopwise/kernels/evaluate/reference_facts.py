"""What a search is told before its first candidate: the device's measured ceilings, the
reference's eager and torch.compile times and the speed-of-light floor, as one JSON-safe record in
which anything not measured is None with a note saying why (never a made-up number)."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

FIELDS = ("device", "statistic", "eager_ms", "compile_ms", "floor_ms", "floor_bound", "bandwidth_gbs",
          "fp32_tflops", "tf32_tflops", "bf16_tflops")


def unknown(device: str, why: str) -> dict:
    """A record in which nothing was measured, saying why."""
    return {**dict.fromkeys(FIELDS), "device": device, "notes": [why]}


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}".rstrip(": ")


def local_facts(judge, compile: bool, seed: int) -> dict:
    """The facts a judge on this machine measures: eager from its own reference timing (the
    figure every speedup of the run divides), torch.compile in a sandbox on a GPU only (on the
    CPU a compile costs minutes and its time means nothing) and only when ``compile``, the floor
    and the ceilings it judges against. ``seed`` draws the inputs the reference was timed on."""
    facts = unknown(judge.device_name, "")
    facts["notes"], facts["statistic"] = [], judge.cfg.statistic
    try:
        timing = judge.reference_timing().timing
        facts["eager_ms"] = timing.pick(judge.cfg.statistic) if timing is not None else None
    except Exception as exc:  # noqa: BLE001 - a fact not measured is said so, the search goes on
        facts["notes"].append(f"eager time not measured ({_brief(exc)})")
    if not compile or not judge.device.startswith("cuda"):
        why = "not asked for" if not compile else "not measured on the CPU"
        facts["notes"].append(f"torch.compile time {why}")
    else:
        try:
            args = judge.reference.draw(seed)
            result = judge.ref_times.get(judge.problem.sha256, judge.problem.source, "compile", args, None)
            judge.reference.drop(seed)
            if result.timing is not None:
                facts["compile_ms"] = result.timing.pick(judge.cfg.statistic)
            else:
                facts["notes"].append(f"torch.compile failed ({result.status}: {result.message[:200]})")
        except Exception as exc:  # noqa: BLE001
            facts["notes"].append(f"torch.compile time not measured ({_brief(exc)})")
    floor = judge._floor_for()
    if floor is not None:
        facts["floor_ms"], facts["floor_bound"] = floor.floor_ms, floor.bound
        if floor.note:
            facts["notes"].append(floor.note)
    else:
        facts["notes"].append("no speed-of-light floor (the work could not be counted)")
    facts.update(ceilings(judge.device, facts["notes"]))
    return facts


def ceilings(device: str, notes: list[str]) -> dict:
    """The device's measured ceilings (cached per device), or an empty dict and a note."""
    try:
        from loopwise.kernels.roofline.ceilings import load_or_measure

        c = load_or_measure(device)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"device ceilings not measured ({_brief(exc)})")
        return {}
    return {"bandwidth_gbs": c.bandwidth_gbs, "fp32_tflops": c.fp32_tflops, "tf32_tflops": c.tf32_tflops,
            "bf16_tflops": c.bf16_tflops}
