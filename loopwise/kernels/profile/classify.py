"""Roofline classifier: what limits one kernel, and how close it is to that limit.

Each kernel's speed-of-light time is the larger of two times on the device's *measured* ceilings
(:class:`~loopwise.kernels.roofline.ceilings.Ceilings`): its DRAM bytes at the copy bandwidth, and
its FLOPs at the matmul rates. The larger one is the bound side; the ratio of that time to the
measured time is the fraction of speed of light achieved.

Classes, decided in this order:

``memory_bound`` / ``compute_bound``
    The kernel reaches at least ``SIDE_FRACTION`` (50%) of the speed of light of its side. The
    side is the one whose time is larger, i.e. arithmetic intensity (FLOP/byte) against the ridge
    point (peak FLOP/s over bandwidth): below the ridge, memory; above it, compute. At half the
    roof a kernel is already shaped by that resource: doubling it at most would reach the roof.
``latency_bound``
    Below ``SIDE_FRACTION`` of its roof *and* either shorter than ``LAUNCH_SCALE_S`` (5 us) or
    launching fewer blocks than the GPU has SMs. Such a kernel cannot fill the machine: launch and
    ramp-up take a few microseconds on their own, and idle SMs contribute neither bandwidth nor
    FLOPs. The fix is fusion or more parallelism, not a better inner loop.
``memory_bound`` / ``compute_bound`` (through ncu's throughput %)
    Below ``SIDE_FRACTION`` of the DRAM/FLOP roof with enough work, but ncu reports the memory
    hierarchy or the SMs at or above ``UNIT_BUSY_PCT`` (60%) of their own peak. Our roof sees only
    DRAM bytes and FP FLOPs; a kernel saturating L1, L2 or shared memory, or issue slots with
    integer work, is still limited by that unit even though both roofs look far away.
``underutilized``
    Everything else: enough work to fill the GPU, yet below half of both ceilings (the other side
    is always further than the bound side) and no unit busy. Stalls (dependencies, poor occupancy,
    synchronization) waste the hardware; this is the class with the most headroom.

``at_roofline`` is a fraction of at least ``AT_ROOFLINE`` (80%). The ceilings are themselves
achieved rates of tuned library code (a torch copy, cuBLAS), run-to-run timing varies by a few
percent and every launch pays a ramp-up, so a kernel within 1.25x of them has little left that
rewriting its body can win; past that point the work itself (bytes, FLOPs) has to shrink.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from loopwise.kernels.profile.ncu import KernelMetrics
from loopwise.kernels.roofline.ceilings import Ceilings

__all__ = [
    "AT_ROOFLINE",
    "LAUNCH_SCALE_S",
    "SIDE_FRACTION",
    "UNIT_BUSY_PCT",
    "Classification",
    "KernelClass",
    "KernelSample",
    "classify",
    "sample_from_ncu",
]

KernelClass = Literal["memory_bound", "compute_bound", "latency_bound", "underutilized"]
TensorPrecision = Literal["tf32", "bf16", "fp16"]

AT_ROOFLINE = 0.80
SIDE_FRACTION = 0.50
LAUNCH_SCALE_S = 5e-6
UNIT_BUSY_PCT = 60.0


@dataclass(frozen=True)
class KernelSample:
    """What was measured of one kernel; unknown quantities are ``None``.

    Attributes:
        name: kernel name.
        time_s: measured duration, seconds.
        bytes: DRAM bytes read plus written.
        flops: FLOPs on the CUDA cores (fp32 add, mul, and 2 per FMA).
        tensor_flops: FLOPs on the tensor cores.
        tensor_precision: input precision of the tensor-core work; picks the ceiling it is held to
            (``tf32`` -> ``tf32_tflops``, ``bf16``/``fp16`` -> ``bf16_tflops``).
        sm_throughput_pct: ncu ``sm__throughput`` % of peak.
        memory_throughput_pct: ncu ``gpu__compute_memory_throughput`` % of peak.
        grid_blocks: blocks launched.
    """

    name: str
    time_s: float
    bytes: float | None
    flops: float | None
    tensor_flops: float | None = None
    tensor_precision: TensorPrecision = "bf16"
    sm_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    grid_blocks: int | None = None


@dataclass(frozen=True)
class Classification:
    """The verdict on one kernel.

    Attributes:
        kernel: kernel name.
        kernel_class: ``memory_bound``, ``compute_bound``, ``latency_bound`` or ``underutilized``.
        bound: the side of the roofline that sets the speed of light (``memory`` or ``compute``).
        sol_time_s: speed-of-light time, the larger of ``memory_time_s`` and ``compute_time_s``.
        memory_time_s: bytes at the copy bandwidth (``None`` if bytes are unknown).
        compute_time_s: FLOPs at the matmul rates (``None`` if FLOPs are unknown).
        fraction_of_sol: ``sol_time_s / time_s``; can exceed 1 slightly, since the ceilings are
            measured rates rather than datasheet peaks.
        at_roofline: ``fraction_of_sol >= AT_ROOFLINE``.
        arithmetic_intensity: FLOPs per DRAM byte (``None`` if either is unknown or bytes are 0).
        ridge_point: FLOP/byte where the two roofs meet for this kernel's FLOP mix.
        achieved_gbs: DRAM bandwidth reached, GB/s.
        achieved_tflops: FLOP rate reached (CUDA plus tensor cores), TFLOP/s.
        explanation: one sentence with the numbers.
    """

    kernel: str
    kernel_class: KernelClass
    bound: Literal["memory", "compute"]
    sol_time_s: float
    memory_time_s: float | None
    compute_time_s: float | None
    fraction_of_sol: float
    at_roofline: bool
    arithmetic_intensity: float | None
    ridge_point: float | None
    achieved_gbs: float | None
    achieved_tflops: float | None
    explanation: str


def classify(sample: KernelSample, ceilings: Ceilings, num_sms: int | None = None) -> Classification:
    """Places one kernel on the roofline of a device and names what limits it.

    Args:
        sample: the kernel's measured time, bytes, FLOPs and (optional) ncu throughputs.
        ceilings: the device's measured rates.
        num_sms: streaming multiprocessors on the device (``Ceilings`` does not carry it); without
            it, only the duration can mark a kernel as too small to fill the GPU.

    Returns:
        The classification.

    Raises:
        ValueError: a non-positive time, negative work, or neither bytes nor FLOPs known.
    """
    _validate(sample)
    memory_s = None if sample.bytes is None else sample.bytes / (ceilings.bandwidth_gbs * 1e9)
    compute_s = _compute_time(sample, ceilings)
    if memory_s is None and compute_s is None:
        raise ValueError(f"{sample.name}: the roofline needs bytes or FLOPs, and neither is known")
    bound: Literal["memory", "compute"] = (
        "compute" if memory_s is None or (compute_s is not None and compute_s > memory_s) else "memory")
    sol_s = compute_s if bound == "compute" else memory_s
    assert sol_s is not None  # the bound side is a known one by construction
    fraction = sol_s / sample.time_s
    kernel_class, reason = _decide(sample, bound, fraction, num_sms)
    total_flops = _total_flops(sample)
    intensity = None if total_flops is None or not sample.bytes else total_flops / sample.bytes
    ridge = None
    if total_flops and compute_s:
        ridge = (total_flops / compute_s) / (ceilings.bandwidth_gbs * 1e9)
    achieved_gbs = None if sample.bytes is None else sample.bytes / sample.time_s / 1e9
    achieved_tflops = None if total_flops is None else total_flops / sample.time_s / 1e12
    verdict = Classification(
        kernel=sample.name, kernel_class=kernel_class, bound=bound, sol_time_s=sol_s,
        memory_time_s=memory_s, compute_time_s=compute_s, fraction_of_sol=fraction,
        at_roofline=fraction >= AT_ROOFLINE, arithmetic_intensity=intensity, ridge_point=ridge,
        achieved_gbs=achieved_gbs, achieved_tflops=achieved_tflops, explanation="",
    )
    return _with_explanation(verdict, sample, ceilings, reason, num_sms)


def sample_from_ncu(metrics: KernelMetrics, tensor_precision: TensorPrecision = "bf16") -> KernelSample:
    """Turns ncu-derived quantities into a classifier input.

    Raises:
        ValueError: ncu gave no duration for the kernel (``gpu__time_duration.sum`` missing).
    """
    if metrics.duration_s is None:
        raise ValueError(f"{metrics.name}: ncu reported no gpu__time_duration.sum")
    return KernelSample(
        name=metrics.name, time_s=metrics.duration_s, bytes=metrics.dram_bytes, flops=metrics.fp32_flops,
        tensor_flops=metrics.tensor_ops, tensor_precision=tensor_precision,
        sm_throughput_pct=metrics.sm_throughput_pct, memory_throughput_pct=metrics.memory_throughput_pct,
        grid_blocks=metrics.grid_blocks,
    )


def _validate(sample: KernelSample) -> None:
    if not sample.time_s > 0:
        raise ValueError(f"{sample.name}: measured time must be positive, got {sample.time_s}")
    for label, value in (("bytes", sample.bytes), ("flops", sample.flops), ("tensor_flops", sample.tensor_flops)):
        if value is not None and value < 0:
            raise ValueError(f"{sample.name}: {label} must not be negative, got {value}")


def _compute_time(sample: KernelSample, ceilings: Ceilings) -> float | None:
    """CUDA-core FLOPs at the SGEMM rate plus tensor FLOPs at their precision's rate, in seconds.

    fp32 work is held to the SGEMM ceiling (TF32 off): a CUDA-core kernel cannot use TF32 rates.
    """
    if sample.flops is None and sample.tensor_flops is None:
        return None
    seconds = 0.0
    if sample.flops is not None:
        seconds += sample.flops / (ceilings.fp32_tflops * 1e12)
    if sample.tensor_flops is not None:
        rate = ceilings.tf32_tflops if sample.tensor_precision == "tf32" else ceilings.bf16_tflops
        seconds += sample.tensor_flops / (rate * 1e12)
    return seconds


def _total_flops(sample: KernelSample) -> float | None:
    if sample.flops is None and sample.tensor_flops is None:
        return None
    return (sample.flops or 0.0) + (sample.tensor_flops or 0.0)


def _decide(
    sample: KernelSample, bound: Literal["memory", "compute"], fraction: float, num_sms: int | None
) -> tuple[KernelClass, str]:
    """Applies the rules of the module docstring, in order; returns the class and why."""
    side: KernelClass = "memory_bound" if bound == "memory" else "compute_bound"
    if fraction >= SIDE_FRACTION:
        return side, "roof"
    if sample.time_s < LAUNCH_SCALE_S:
        return "latency_bound", "short"
    if num_sms is not None and sample.grid_blocks is not None and sample.grid_blocks < num_sms:
        return "latency_bound", "few_blocks"
    memory_pct, sm_pct = sample.memory_throughput_pct, sample.sm_throughput_pct
    busiest = max((pct for pct in (memory_pct, sm_pct) if pct is not None), default=None)
    if busiest is not None and busiest >= UNIT_BUSY_PCT:
        return ("memory_bound", "unit_memory") if busiest == memory_pct else ("compute_bound", "unit_sm")
    return "underutilized", "idle"


def _with_explanation(
    verdict: Classification, sample: KernelSample, ceilings: Ceilings, reason: str, num_sms: int | None
) -> Classification:
    """Fills in the one-sentence explanation; kept apart so the numbers are computed once."""
    head = (f"{sample.name} ({verdict.kernel_class}) ran {_time(sample.time_s)}, "
            f"{_percent(verdict.fraction_of_sol)} of its {verdict.bound} speed of light {_time(verdict.sol_time_s)}")
    if reason == "roof":
        achieved = (f"{verdict.achieved_gbs:.0f} of {ceilings.bandwidth_gbs:.0f} GB/s"
                    if verdict.bound == "memory" else
                    f"{verdict.achieved_tflops:.1f} of {_roof_tflops(verdict, ceilings):.1f} TFLOP/s")
        tail = "at the roofline" if verdict.at_roofline else f"below the {AT_ROOFLINE:.0%} at-roofline mark"
        text = f"{head} ({achieved}): {tail}."
    elif reason == "short":
        text = (f"{head}: shorter than {_time(LAUNCH_SCALE_S)}, so launch and ramp-up, "
                "not bandwidth or FLOPs, set its time.")
    elif reason == "few_blocks":
        text = f"{head}: {sample.grid_blocks} blocks on {num_sms} SMs leave SMs idle for the whole kernel."
    elif reason in ("unit_memory", "unit_sm"):
        unit, pct = (("memory hierarchy", sample.memory_throughput_pct) if reason == "unit_memory"
                     else ("SM", sample.sm_throughput_pct))
        text = (f"{head}, yet ncu shows the {unit} {pct:.0f}% busy: a unit the DRAM/FLOP roofline "
                "does not see (L1, L2, shared memory or issue) is the limit.")
    else:
        text = (f"{head} with enough work to fill the GPU and no unit busy: stalls, not the hardware's "
                "ceilings, set its time.")
    return replace(verdict, explanation=text)


def _roof_tflops(verdict: Classification, ceilings: Ceilings) -> float:
    """The compute roof of this kernel's FLOP mix (blended when CUDA and tensor cores share it)."""
    assert verdict.ridge_point is not None  # known whenever the compute side is the bound
    return verdict.ridge_point * ceilings.bandwidth_gbs / 1e3


def _percent(fraction: float) -> str:
    """90% or 4.7% or 0.096%: whole percents above 10, two significant digits below."""
    percent = fraction * 100
    return f"{percent:.0f}%" if percent >= 10 else f"{percent:.2g}%"


def _time(seconds: float) -> str:
    """Seconds in the unit a person reads fastest: ns, us, ms or s."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
