"""What the kernel proposer is told: the judge's rules, the target, how a candidate was judged, and
for a failed candidate everything a repair needs (its reasons, mismatch statistics, trimmed log)."""

from __future__ import annotations

from collections.abc import Sequence

REPAIR_LOG_BUDGET = 4000  # characters of a failed candidate's log shown to a repair
FAILED_TRIALS_SHOWN = 3
PROFILE_NOTES = 8  # findings passed on per profile, highest score first
_CONTRACT_CODES = ("syntax_error", "missing_modelnew")  # said by the file contract instead

_FILE_CONTRACT = ("File contract: one self-contained Python file that defines `class ModelNew(torch.nn.Module)` "
                  "whose constructor takes the same arguments as the reference `Model` and whose `forward` takes "
                  "the same inputs and returns the same outputs; it must launch its own kernel (Triton, CUDA/C++ "
                  "or CuTe), not only call PyTorch.")
_POLICIES = {
    "fp32": ("Precision policy fp32: no reduced-precision math in place of fp32 (no TF32, fp16, bf16 or fp8); "
             "TF32x3 emulation is allowed because it keeps fp32 accuracy. A Triton `tl.dot` on fp32 inputs must "
             "pass input_precision='ieee' or 'tf32x3' (its default is TF32)."),
    "relaxed": "Precision policy relaxed: any precision is allowed while the outputs stay within the tolerance.",
}


def rules(policy: str, atol: float, rtol: float) -> tuple[str, ...]:
    """The judge's rules as sentences for a prompt: the file contract, the precision policy and
    tolerance, the static check's reject codes (one sentence each) and the speed-of-light rule."""
    from loopwise.kernels.check._codes import CODES

    out = [_FILE_CONTRACT, _POLICIES.get(policy, f"Precision policy {policy}."),
           f"Tolerance: every output within atol={atol:g}, rtol={rtol:g} of the reference, on fresh random "
           "inputs of several distributions, in both run orders."]
    for code in CODES.values():
        if code.severity != "reject" or code.name in _CONTRACT_CODES:
            continue
        if code.name == "precision_downgrade" and policy != "fp32":
            continue
        out.append(f"Forbidden ({code.name}): {code.meaning}.")
    out.append("A speedup beyond the speed-of-light floor is treated as an exploit until proven otherwise.")
    return tuple(out)


def judge_options(stated: Sequence[str]) -> tuple[str, ...]:
    """The ``kernels eval`` options that judge as ``stated`` (what :func:`rules` wrote) says: its
    precision policy and its tolerance, each left out when the rules do not name one."""
    from loopwise.kernels.config import TOLERANCES

    out: tuple[str, ...] = ()
    policy = next((name for name, text in _POLICIES.items() if text in stated), None)
    if policy is not None:
        out += ("--precision", policy)
    for line in stated:
        if line.startswith("Tolerance: every output within atol="):
            atol = float(line.removeprefix("Tolerance: every output within atol=").split(",", 1)[0])
            name = next((name for name, value in TOLERANCES.items() if value == atol), None)
            out += ("--tolerance", name) if name is not None else ()
    return out


def _ms(value) -> str:
    return f"{value:.4f} ms"


def _figure(value: float) -> str:
    """One decimal from 1 up, two significant digits below (a CPU's 0.023, not 0.0)."""
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def target(facts: dict, evaluations: dict[int, dict]) -> str:
    """The device with its measured ceilings, and the reference's eager and torch.compile times and
    speed-of-light floor (``facts``, from ``Judge.reference_facts``); a time the facts lack is taken
    from the latest judged candidate, else stated as unknown with the reason."""
    notes = facts.get("notes") or []
    lines = [f"Device: {facts.get('device') or 'unknown'}."]
    peaks = [(f"copy bandwidth {facts['bandwidth_gbs']:.0f} GB/s" if facts.get("bandwidth_gbs") else "")]
    peaks += [f"{label} GEMM {_figure(facts[key])} TFLOP/s" for key, label in
              (("fp32_tflops", "fp32"), ("tf32_tflops", "TF32"), ("bf16_tflops", "bf16")) if facts.get(key)]
    peaks = [p for p in peaks if p]
    lines.append("Measured ceilings: " + (", ".join(peaks) if peaks else _unknown(notes, "ceilings")) + ".")
    timed = [e["data"] for e in evaluations.values() if (e.get("data") or {}).get("reference_timing")]
    last = timed[-1] if timed else {}
    stat = facts.get("statistic") or "median"
    eager = facts.get("eager_ms") or (last.get("reference_timing") or {}).get("median_ms")
    lines.append(f"Eager PyTorch reference: {stat} {_ms(eager)}." if eager is not None
                 else f"Eager PyTorch reference: {_unknown(notes, 'eager')}.")
    compiled = facts.get("compile_ms")
    lines.append(f"torch.compile of the reference: {stat} {_ms(compiled)}." if compiled is not None
                 else f"torch.compile of the reference: {_unknown(notes, 'torch.compile')}.")
    floor = facts.get("floor_ms") or last.get("floor_ms")
    bound = facts.get("floor_bound") or last.get("floor_bound")
    lines.append(f"Speed-of-light floor: {_ms(floor)}" + (f" ({bound}-bound)" if bound else "") + "."
                 if floor else f"Speed-of-light floor: {_unknown(notes, 'floor')}.")
    return " ".join(lines)


def _unknown(notes: list[str], topic: str) -> str:
    """``unknown`` and the note that says why, when one names ``topic``."""
    why = next((n for n in notes if topic in n), "")
    return f"unknown ({why})" if why else "unknown (not measured)"


def judged_context(data: dict) -> tuple[str, tuple]:
    """What a proposer is told about a judged candidate: one line (status, speedup, times against
    eager and the speed-of-light floor) and the judge's reasons as findings (rejections, flags and
    notes, each with its scalar evidence), so a model can fix what failed rather than guess."""
    from loopwise.core.propose import FindingNote

    status = data.get("status", "?")
    parts = [status]
    if data.get("speedup"):
        parts.append(f"{data['speedup']:.3f}x over eager")
    timing, ref = data.get("timing") or {}, data.get("reference_timing") or {}
    if timing.get("median_ms") is not None:
        times = f"median {timing['median_ms']:.4f} ms"
        if ref.get("median_ms") is not None:
            times += f" vs eager {ref['median_ms']:.4f} ms"
        if data.get("floor_ms"):
            times += f"; speed-of-light floor {data['floor_ms']:.4f} ms"
        parts.append(times)
    notes = []
    for reason in data.get("reasons") or ():
        evidence = {k: v for k, v in (reason.get("evidence") or {}).items() if isinstance(v, (int, float, str, bool))}
        notes.append(FindingNote(text=f"{reason.get('severity', 'reject')} {reason.get('code', '?')}: "
                                      f"{reason.get('message', '')}", evidence=evidence))
    return ", ".join(parts), tuple(notes)


def _failed_trials(data: dict) -> tuple:
    """The first failed correctness trials as findings: input kind, seed and the error statistics."""
    from loopwise.core.propose import FindingNote

    notes = []
    for trial in [t for t in data.get("trials") or () if not t.get("passed")][:FAILED_TRIALS_SHOWN]:
        evidence = {k: trial[k] for k in ("max_abs_err", "max_rel_err", "norm_err") if trial.get(k) is not None}
        text = f"failed trial {trial.get('kind', '?')} (seed {trial.get('seed', '?')})"
        notes.append(FindingNote(text=text + (f": {trial['message']}" if trial.get("message") else ""),
                                 evidence=evidence))
    return tuple(notes)


def repair_context(data: dict, log: str) -> tuple[str, tuple, str]:
    """What a repair of a failed candidate is told: the verdict line, the reasons it was failed
    (rule, message, evidence) with its failed trials' statistics, and its log cut to the lines
    around the errors."""
    from loopwise.core.propose import log_excerpt

    summary, reasons = judged_context(data)
    return summary, reasons + _failed_trials(data), log_excerpt(log or "", REPAIR_LOG_BUDGET)


def profile_notes(report) -> tuple:
    """A profile as proposer findings: one line per kernel with its roofline class and numbers
    (every mode, raw included: they are the measurements), then the tools' findings with their
    suggested moves (none in raw mode)."""
    from loopwise.core.propose import FindingNote

    notes = []
    for k in report.kernels[:6]:
        parts = [k.kernel_class.replace("_", "-") if k.kernel_class else "not classified"]
        if k.fraction_of_sol is not None:
            parts.append(f"{100 * k.fraction_of_sol:.0f}% of its speed of light")
        if k.duration_us is not None:
            parts.append(f"{k.duration_us:.1f} us")
        evidence = {key: round(v, 4) if isinstance(v, float) else v for key, v in
                    (("duration_us", k.duration_us), ("dram_mb", k.dram_mb), ("gflop", k.gflop),
                     ("achieved_gbs", k.achieved_gbs), ("registers", k.registers), ("launches", k.launches))
                    if v is not None}
        notes.append(FindingNote(text=f"kernel {k.name[:80]}: " + ", ".join(parts), evidence=evidence))
    notes += [f.as_note() for f in report.findings[:PROFILE_NOTES]]
    return tuple(notes)


def notes_from(items: list[dict]) -> tuple:
    """Findings recorded in the store (text and evidence) as prompt findings again."""
    from loopwise.core.propose import FindingNote

    return tuple(FindingNote(text=i["text"], evidence=i.get("evidence") or {}) for i in items)
