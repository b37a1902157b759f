"""Energy per call: the arithmetic against a fake NVML, the ways it gives up, and a real GPU."""

from __future__ import annotations

import logging
import sys
import time
import types

import pytest
import torch

from loopwise.kernels.evaluate import energy
from loopwise.kernels.evaluate.energy import measure_energy

FAKE_WATTS = 100.0
FAKE_REFRESH_S = 0.01


class FakeNVMLError(Exception):
    pass


def _fake_pynvml(counter: object = None) -> types.ModuleType:
    """A pynvml whose energy counter is a 100 W device that refreshes every 10 ms."""
    start = time.perf_counter()
    state = {"open": 0}

    def total_energy_mj(handle: object) -> int:
        ticks = (time.perf_counter() - start) // FAKE_REFRESH_S
        return 5_000_000 + int(ticks * FAKE_REFRESH_S * FAKE_WATTS * 1e3)

    def by_bus_id(bus_id: str) -> object:
        raise FakeNVMLError("not found")

    module = types.ModuleType("pynvml")
    module.state = state
    module.nvmlInit = lambda: state.update(open=state["open"] + 1)
    module.nvmlShutdown = lambda: state.update(open=state["open"] - 1)
    module.nvmlDeviceGetHandleByIndex = lambda index: f"gpu{index}"
    module.nvmlDeviceGetHandleByPciBusId = by_bus_id
    module.nvmlDeviceGetTotalEnergyConsumption = counter or total_energy_mj
    return module


def test_energy_arithmetic_with_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    result = measure_energy(lambda: time.sleep(0.001), min_seconds=0.1)
    assert result is not None
    assert result.seconds >= 0.1
    assert result.calls >= 20
    assert result.watts == pytest.approx(FAKE_WATTS, rel=0.2)
    assert result.joules_per_call * result.calls == pytest.approx(result.watts * result.seconds)
    assert fake.state["open"] == 0


class AsyncDevice:
    """A device that runs each call for ``call_s`` after the previous one, as a GPU runs queued
    launches: the host returns at once until ``depth`` calls are pending (CUDA's launch queue)."""

    def __init__(self, call_s: float, depth: int) -> None:
        self.call_s, self.depth, self.done_at = call_s, depth, []
        self.most_pending = 0  # the most calls ever queued at once

    def call(self) -> None:
        now = time.perf_counter()
        self.done_at = [t for t in self.done_at if t > now]
        if len(self.done_at) >= self.depth:  # the queue is full: wait for its head
            time.sleep(self.done_at[0] - now)
        start = max(self.done_at[-1] if self.done_at else 0.0, time.perf_counter())
        self.done_at.append(start + self.call_s)
        self.most_pending = max(self.most_pending, len(self.done_at))

    def sync(self) -> None:
        if self.done_at:
            time.sleep(max(0.0, self.done_at[-1] - time.perf_counter()))
        self.done_at = []


def test_energy_of_slow_calls_takes_about_min_seconds_not_a_full_launch_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls that run longer than they take to launch (a 20 ms kernel): the loop waits for the device
    between batches, so it measures about min_seconds of calls instead of queueing as many as the
    launch queue holds (a slow candidate's energy phase on the H200: docs/log/2026-12-01.md, 11:31 section)."""
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    device = AsyncDevice(call_s=0.02, depth=64)  # a full queue would be 1.28 s of work
    result = measure_energy(device.call, min_seconds=0.1, sync=device.sync)
    assert result is not None
    assert device.most_pending < device.depth, (device.most_pending, result)  # synced before the queue filled
    assert result.calls * 0.02 == pytest.approx(result.seconds, rel=0.5)


def test_no_pynvml_returns_none(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with caplog.at_level(logging.INFO, logger=energy.__name__):
        assert measure_energy(lambda: None) is None
    assert "nvidia-ml-py" in caplog.text


def test_unsupported_counter_returns_none(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def unsupported(handle: object) -> int:
        raise FakeNVMLError("Not Supported")

    fake = _fake_pynvml(unsupported)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert measure_energy(lambda: None) is None
    assert "Not Supported" in caplog.text
    assert fake.state["open"] == 0


def test_frozen_counter_returns_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(lambda handle: 42))
    monkeypatch.setattr(energy, "_EDGE_TIMEOUT_S", 0.02)
    assert measure_energy(lambda: None, min_seconds=0.05) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_energy_is_plausible() -> None:
    pytest.importorskip("pynvml")
    a = torch.rand(4096, 4096, device="cuda")
    result = measure_energy(lambda: torch.mm(a, a), sync=torch.cuda.synchronize)
    if result is None:
        pytest.skip("this GPU exposes no NVML energy counter")
    assert result.seconds >= 0.2
    assert 10 < result.watts < 2000
    assert result.joules_per_call > 0
