"""Energy per call from the GPU's cumulative energy counter (NVML).

The counter (millijoules since driver load) refreshes only every 20-100 ms, so a read can be up to
one refresh stale. We therefore start timing on a counter update, and keep calling until the next
update after ``min_seconds``: then both reads are fresh and the error is at most one batch of calls.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

_CALIBRATE_S = 0.02  # time the calibration loop must fill before we trust its per-call time
_BATCH_S = 0.005  # calls between counter polls once past min_seconds; bounds the end-edge error
_EDGE_TIMEOUT_S = 0.5  # the slowest documented refresh is 100 ms; wait five times that


@dataclass(frozen=True)
class EnergyResult:
    """Energy of one call of a function, averaged over a loop of calls.

    Attributes:
        joules_per_call: energy per call, in joules (the whole GPU, idle power included).
        calls: calls in the measured loop.
        seconds: host time between the two counter reads.
        watts: average power over the loop.
    """

    joules_per_call: float
    calls: int
    seconds: float
    watts: float


def measure_energy(
    fn: Callable[[], None],
    device_index: int = 0,
    min_seconds: float = 0.2,
    sync: Callable[[], None] | None = None,
) -> EnergyResult | None:
    """Measures the GPU energy of ``fn`` with NVML's total-energy counter.

    Args:
        fn: one call of the work, e.g. a model's forward on fixed inputs.
        device_index: CUDA device index; mapped to the NVML device by PCI bus id when possible,
            because ``CUDA_VISIBLE_DEVICES`` renumbers devices for CUDA but not for NVML.
        min_seconds: least duration of the measured loop (several counter refreshes).
        sync: waits for queued GPU work, e.g. ``torch.cuda.synchronize``; ``None`` for none.

    Returns:
        The result, or ``None`` (with the reason logged) when NVML or the counter is unavailable.
    """
    try:
        import pynvml
    except ImportError:
        logger.info("energy not measured: pynvml (package nvidia-ml-py) is not installed")
        return None
    try:
        pynvml.nvmlInit()
    except Exception as error:  # noqa: BLE001 - NVMLError subclasses vary by driver
        logger.info("energy not measured: NVML did not initialize (%s)", error)
        return None
    try:
        handle = _handle(pynvml, device_index)
        read = lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # noqa: E731
        read()
    except Exception as error:  # noqa: BLE001
        logger.warning("energy not measured: no energy counter on device %s (%s)", device_index, error)
        pynvml.nvmlShutdown()
        return None
    try:
        return _measure(fn, read, sync or (lambda: None), min_seconds)
    finally:
        pynvml.nvmlShutdown()


def _measure(
    fn: Callable[[], None], read: Callable[[], int], sync: Callable[[], None], min_seconds: float
) -> EnergyResult | None:
    per_call = _seconds_per_call(fn, sync)
    calls = max(1, math.ceil(min_seconds / per_call))
    batch = max(1, math.floor(_BATCH_S / per_call))
    sync()
    start_mj, start = _wait_for_update(read)
    for _ in range(calls):
        fn()
    sync()  # host time tracks the device's from here: launches return before their work is done
    while time.perf_counter() - start < min_seconds:  # the calibration ran slower than this loop
        for _ in range(batch):
            fn()
        calls += batch
        sync()  # else the host fills the launch queue (~1000 calls) before its clock reaches the end
    # This read may be up to one refresh stale: keep the GPU busy until the counter moves, so the
    # end value covers all our calls (and at most one batch more, which we count).
    stale = end_mj = read()
    deadline = time.perf_counter() + _EDGE_TIMEOUT_S
    while end_mj == stale and time.perf_counter() < deadline:
        for _ in range(batch):
            fn()
        calls += batch
        sync()
        end_mj = read()
    seconds = time.perf_counter() - start
    if end_mj <= start_mj:
        logger.warning("energy not measured: the counter did not advance in %.3f s", seconds)
        return None
    joules = (end_mj - start_mj) / 1e3
    return EnergyResult(joules_per_call=joules / calls, calls=calls, seconds=seconds, watts=joules / seconds)


def _seconds_per_call(fn: Callable[[], None], sync: Callable[[], None]) -> float:
    fn()  # warm-up: compilation, allocator, caches
    sync()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= _CALIBRATE_S or calls >= 1 << 20:
            return max(elapsed / calls, 1e-9)
        calls *= 2


def _wait_for_update(read: Callable[[], int]) -> tuple[int, float]:
    """Spins until the counter changes; returns the new value and the host time it was seen."""
    first = read()
    deadline = time.perf_counter() + _EDGE_TIMEOUT_S
    while time.perf_counter() < deadline:
        value = read()
        if value != first:
            return value, time.perf_counter()
    return first, time.perf_counter()


def _handle(pynvml: Any, device_index: int) -> Any:
    bus_id = _pci_bus_id(device_index)
    if bus_id is not None:
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        except Exception:  # noqa: BLE001 - fall back to the index below
            logger.debug("NVML has no device at PCI bus id %s; using index %s", bus_id, device_index)
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        logger.debug("CUDA_VISIBLE_DEVICES is set; NVML index %s may be another GPU", device_index)
    return pynvml.nvmlDeviceGetHandleByIndex(device_index)


def _pci_bus_id(device_index: int) -> str | None:
    """``00000000:19:00.0`` for a CUDA device, if torch can tell; NVML names devices this way."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(device_index)
        return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except Exception:  # noqa: BLE001 - older torch lacks the pci_* fields
        return None
