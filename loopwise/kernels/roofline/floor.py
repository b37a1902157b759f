"""Speed-of-light floor of a problem: the least time any correct kernel could take.

A measured time below the floor is physically impossible, so it points at an exploit (work on
a side stream, cached results) or a broken timer. The floor is a lower bound on purpose: it counts
only matmul-class FLOPs and only the bytes that must cross DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from loopwise.kernels.evaluate.inputs import nbytes

if TYPE_CHECKING:
    from loopwise.kernels.problem import Problem
    from loopwise.kernels.roofline.ceilings import Ceilings

Policy = Literal["fp32", "relaxed"]
# Above this many input elements a CPU fallback run would take too long or too much memory.
CPU_FALLBACK_NUMEL = 10_000_000
_HALF_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class Work:
    """What one forward call of a problem must do, counted without running it for real.

    Attributes:
        flops: matmul / conv / bmm / addmm / attention FLOPs (``FlopCounterMode``); ``None`` if the
            forward could not be run. Elementwise ops and reductions count zero.
        input_bytes: bytes of the tensors ``get_inputs()`` returns.
        output_bytes: bytes of the tensors ``forward`` returns.
        param_bytes: bytes of the model's parameters and buffers.
        dtype: dtype of the largest input tensor, e.g. ``float32``.
        notes: how the numbers were obtained, and what could not be counted.
    """

    flops: int | None
    input_bytes: int | None
    output_bytes: int | None
    param_bytes: int | None
    dtype: str | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Floor:
    """The speed-of-light time of a problem on a device, in milliseconds.

    Attributes:
        memory_ms: time to read the inputs and write the outputs that do not fit in L2.
        compute_ms: time for ``flops`` at the peak rate the precision policy allows.
        floor_ms: the larger of the two (``None`` if neither is known).
        bound: which of the two decides the floor.
        policy: the precision policy the compute rate was chosen for.
        tflops: that rate, in TFLOP/s.
        note: which parts a trusted time showed wrong and dropped (see :func:`speed_of_light`), or empty.
    """

    memory_ms: float | None
    compute_ms: float | None
    floor_ms: float | None
    bound: Literal["memory", "compute"] | None
    policy: str
    tflops: float
    note: str = ""


def peak_tflops(ceilings: Ceilings, policy: Policy = "fp32", dtype: str | None = None) -> float:
    """The fastest matmul rate a correct kernel may use.

    Under ``fp32`` that is the fp32-accurate rate: SGEMM, or a third of TF32 because 3xTF32
    emulation keeps fp32 accuracy. Under ``relaxed``, or for a half-precision problem, it is the
    fastest rate measured (bf16 on a GPU).

    Args:
        ceilings: measured device rates.
        policy: ``fp32`` or ``relaxed``.
        dtype: the problem's dtype; ``float16`` / ``bfloat16`` use the half-precision rate.

    Returns:
        TFLOP/s.
    """
    if policy == "relaxed" or dtype in _HALF_DTYPES:
        return max(ceilings.bf16_tflops, ceilings.tf32_tflops, ceilings.fp32_tflops)
    if policy != "fp32":
        raise ValueError(f"unknown precision policy {policy!r} (expected fp32 or relaxed)")
    return max(ceilings.fp32_tflops, ceilings.tf32_tflops / 3)


def speed_of_light(work: Work, ceilings: Ceilings, policy: Policy = "fp32",
                   proven_ms: float | None = None) -> Floor:
    """Computes the floor of ``work`` on a device with ``ceilings``; a pure function.

    Memory: inputs must come from DRAM (the timer flushes L2 before each call); outputs count only
    beyond the L2 size, because a write-back L2 may still hold a small output at the end event.
    Parameters are left out: an honest algebraic rewrite may precompute from the weights once.

    Args:
        work: counted by :func:`count_work`.
        ceilings: measured device rates.
        policy: ``fp32`` or ``relaxed`` (see :func:`peak_tflops`).
        proven_ms: a time in which this device did this work (the trusted reference's measured
            time). Measured ceilings can read low (another process on the GPU, a cold clock), and
            so can the work be over-counted (an input of which the forward reads a slice): a part
            above a time the device achieved is shown wrong, so it is dropped (``None``, it
            rejects and flags nothing), and ``note`` names it.

    Returns:
        The floor; unknown parts are ``None``.
    """
    tflops = peak_tflops(ceilings, policy, work.dtype)
    memory_ms = None
    if work.input_bytes is not None:
        written = max(0, (work.output_bytes or 0) - ceilings.l2_bytes)
        memory_ms = (work.input_bytes + written) / (ceilings.bandwidth_gbs * 1e9) * 1e3
    compute_ms = None if work.flops is None else work.flops / (tflops * 1e12) * 1e3
    note = ""
    if proven_ms is not None:
        wrong = [f"{name} {ms:.4f} ms" for ms, name in ((memory_ms, "memory"), (compute_ms, "compute"))
                 if ms is not None and ms > proven_ms]
        memory_ms = None if memory_ms is not None and memory_ms > proven_ms else memory_ms
        compute_ms = None if compute_ms is not None and compute_ms > proven_ms else compute_ms
        if wrong:
            note = (f"floor not used: {' and '.join(wrong)} exceed the reference's own {proven_ms:.4f} ms "
                    "(ceilings that read low, or work counted that the forward does not do)")
    known = [(ms, name) for ms, name in ((memory_ms, "memory"), (compute_ms, "compute")) if ms is not None]
    if not known:
        return Floor(None, None, None, None, policy, tflops, note)
    floor_ms, bound = max(known, key=lambda pair: pair[0])
    return Floor(memory_ms, compute_ms, floor_ms, bound, policy, tflops, note)


def count_work(problem: Problem, cpu_fallback_numel: int = CPU_FALLBACK_NUMEL) -> Work:
    """Counts the FLOPs and bytes of one forward call of a problem.

    Inputs and model are built and run on the meta device, so nothing is allocated. If the
    forward cannot run on meta (an op without a meta kernel, ``.item()``), it is run on the CPU
    instead when the inputs have fewer than ``cpu_fallback_numel`` elements; otherwise FLOPs and
    output bytes stay unknown.

    Args:
        problem: a problem that passed validation.
        cpu_fallback_numel: largest total input size, in elements, run on the CPU.

    Returns:
        The counted work.
    """
    import torch

    module = problem.load_module()
    notes: list[str] = []
    try:
        with torch.device("meta"):
            init_args = list(module.get_init_inputs())
            inputs = list(module.get_inputs())
    except Exception as error:  # noqa: BLE001 - counting is best effort, never fatal
        return Work(None, None, None, None, None, (f"inputs could not be built on meta: {_brief(error)}",))
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    input_bytes = nbytes(tensors)
    dtype = str(max(tensors, key=lambda x: x.numel()).dtype).removeprefix("torch.") if tensors else None
    flops, output_bytes, param_bytes = _run_counted(module, init_args, inputs, "meta", notes)
    if flops is None:
        numel = sum(x.numel() for x in tensors)
        if numel < cpu_fallback_numel:
            flops, output_bytes, param_bytes = _run_counted(module, init_args, None, "cpu", notes)
        else:
            notes.append(f"no CPU fallback: {numel} input elements >= {cpu_fallback_numel}")
    return Work(flops, input_bytes, output_bytes, param_bytes, dtype, tuple(notes))


def _run_counted(
    module: Any, init_args: list, inputs: list | None, device: str, notes: list[str]
) -> tuple[int | None, int | None, int | None]:
    """Builds and runs the model on ``device`` under a FLOP counter: (flops, output, param bytes)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from loopwise.kernels.problem import MODELS_IN_PROCESS

    try:
        with MODELS_IN_PROCESS, torch.device(device):
            if inputs is None:
                torch.manual_seed(0)
                init_args, inputs = list(module.get_init_inputs()), list(module.get_inputs())
            model = module.Model(*init_args)
        with MODELS_IN_PROCESS, torch.no_grad(), FlopCounterMode(display=False) as counter:
            output = model(*inputs)
    except Exception as error:  # noqa: BLE001 - counting is best effort, never fatal
        notes.append(f"build or forward failed on {device}: {_brief(error)}")
        return None, None, None
    notes.append(f"counted on {device}")
    param_bytes = nbytes([*model.parameters(), *model.buffers()])
    return counter.get_total_flops(), nbytes(output), param_bytes


def _brief(error: BaseException) -> str:
    first = next((line for line in str(error).splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first.strip()[:200]}"
