"""System-level profile of one forward call: a torch.profiler (Kineto) trace, read into numbers.

``record`` runs a callable under ``torch.profiler`` and writes the Chrome-trace JSON that
Kineto exports; ``read_trace`` turns such a file (ours, or one a user recorded) into a
:class:`SystemTrace`: the GPU kernels in timeline order with the idle gap before each, memory
copies and sets with their bytes, host-side synchronizations, launch API calls, and the span of
the call on the host and on the GPU. Its ``kernels`` feed the cross-kernel tools (launch-bound,
redundant passes) as :class:`~loopwise.kernels.profile.findings.KernelSummary` records.

Kineto's event categories used here (``"cat"`` of complete events, ``"ph": "X"``; ``ts`` and
``dur`` in microseconds): ``kernel`` (GPU kernels; ``args`` carry grid, block, stream), ``gpu_memcpy``
and ``gpu_memset`` (``args.bytes``), ``cuda_runtime`` and ``cuda_driver`` (host API calls:
``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaStreamSynchronize``, ...), ``cpu_op`` and
``user_annotation`` (host work).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from loopwise.kernels.profile.findings import KernelSummary

__all__ = ["SystemTrace", "TraceError", "TracedKernel", "read_trace", "record"]

GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST_API_CATEGORIES = {"cuda_runtime", "cuda_driver"}
# Host API calls that launch a kernel (runtime and driver API; Triton launches through the driver).
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
                "cuLaunchKernelEx", "cudaGraphLaunch", "cuGraphLaunch")
# Host API calls that block the host until the device (or a stream, or an event) is done
# (exact names: cudaMemcpyAsync does not block, cudaMemcpy does).
SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                        "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cudaMemcpy",
                        "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD", "cuMemcpyHtoD_v2"})


CALL_ANNOTATION = "loopwise.call"


class TraceError(ValueError):
    """A file that is not a Chrome trace of the kind Kineto writes."""


class TracedKernel(BaseModel):
    """One GPU kernel of the trace."""

    model_config = ConfigDict(frozen=True)

    name: str
    start_us: float
    duration_us: float
    stream: int | None = None
    grid_blocks: int | None = None
    block_threads: int | None = None
    gap_before_us: float | None = None  # GPU idle time since the previous GPU activity ended


class SystemTrace(BaseModel):
    """What one traced call did on the host and on the GPU."""

    kernels: tuple[TracedKernel, ...]
    memcpy_count: int
    memcpy_bytes: int
    memset_count: int
    launch_calls: int
    sync_calls: int
    sync_names: tuple[str, ...]
    host_span_us: float  # first to last host event (ops and API calls)
    gpu_span_us: float  # first GPU activity start to last GPU activity end
    gpu_busy_us: float  # union of GPU activity intervals
    streams: int

    @property
    def kernel_time_us(self) -> float:
        return sum(k.duration_us for k in self.kernels)

    @property
    def gap_us(self) -> float:
        """GPU idle time between the first and the last GPU activity."""
        return max(self.gpu_span_us - self.gpu_busy_us, 0.0)

    def summaries(self) -> tuple[KernelSummary, ...]:
        """The kernels as the cross-kernel tools take them (seconds; zero-length kernels dropped)."""
        return tuple(KernelSummary(name=k.name, duration_s=k.duration_us * 1e-6, grid_blocks=k.grid_blocks,
                                   gap_before_s=None if k.gap_before_us is None else k.gap_before_us * 1e-6)
                     for k in self.kernels if k.duration_us > 0)

    def headline(self) -> str:
        """One line a person reads: kernels, GPU busy share, copies, syncs."""
        busy = self.gpu_busy_us / self.gpu_span_us if self.gpu_span_us > 0 else 0.0
        return (f"{len(self.kernels)} kernels ({self.launch_calls} launch calls) on {self.streams} stream(s); "
                f"GPU busy {busy:.0%} of {self.gpu_span_us:.1f} us; {self.memcpy_count} copies "
                f"({self.memcpy_bytes / 1e6:.2f} MB), {self.memset_count} memsets; {self.sync_calls} host syncs")


def _events(data) -> list[dict]:
    if isinstance(data, dict):
        events = data.get("traceEvents")
    else:
        events = data
    if not isinstance(events, list):
        raise TraceError("no traceEvents list: not a Chrome trace (torch.profiler's export_chrome_trace writes one)")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def _product(value) -> int | None:
    """Blocks (or threads) of a launch dimension such as ``[64, 2, 1]``; None when not one."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and v > 0 for v in value):
        return math.prod(value)
    return None


def _busy(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def parse(data) -> SystemTrace:
    """A :class:`SystemTrace` from a loaded Chrome trace (dict or event list). When the trace holds
    a ``loopwise.call`` annotation (``record`` adds one), host events outside it (the recorder's own
    synchronization) are left out."""
    events = _events(data)
    gpu = sorted((e for e in events if e.get("cat") in GPU_CATEGORIES), key=lambda e: float(e["ts"]))
    host = [e for e in events if e.get("cat") not in GPU_CATEGORIES]
    marks = [e for e in host if e.get("name") == CALL_ANNOTATION]
    if marks:
        lo, hi = float(marks[0]["ts"]), float(marks[0]["ts"]) + float(marks[0]["dur"])
        host = [e for e in host if lo <= float(e["ts"]) <= hi]
    host_api = [e for e in host if e.get("cat") in HOST_API_CATEGORIES]
    kernels: list[TracedKernel] = []
    last_end: float | None = None
    for e in gpu:
        start, dur = float(e["ts"]), max(float(e["dur"]), 0.0)
        if e.get("cat") == "kernel":
            args = e.get("args") or {}
            gap = None if last_end is None else max(start - last_end, 0.0)
            kernels.append(TracedKernel(name=str(e.get("name", "?")), start_us=start, duration_us=dur,
                                        stream=args.get("stream") if isinstance(args.get("stream"), int) else None,
                                        grid_blocks=_product(args.get("grid")),
                                        block_threads=_product(args.get("block")), gap_before_us=gap))
        last_end = start + dur if last_end is None else max(last_end, start + dur)
    copies = [e for e in gpu if e.get("cat") == "gpu_memcpy"]
    names = [str(e.get("name", "")) for e in host_api]
    syncs = [n for n in names if n in SYNC_CALLS]
    intervals = [(float(e["ts"]), float(e["ts"]) + max(float(e["dur"]), 0.0)) for e in gpu]
    return SystemTrace(
        kernels=tuple(kernels),
        memcpy_count=len(copies),
        memcpy_bytes=sum(int((e.get("args") or {}).get("bytes", 0) or 0) for e in copies),
        memset_count=sum(1 for e in gpu if e.get("cat") == "gpu_memset"),
        launch_calls=sum(1 for n in names if n.startswith(LAUNCH_CALLS)),
        sync_calls=len(syncs),
        sync_names=tuple(sorted(set(syncs))),
        host_span_us=(max(float(e["ts"]) + float(e["dur"]) for e in host) - min(float(e["ts"]) for e in host))
        if host else 0.0,
        gpu_span_us=(max(b for _, b in intervals) - min(a for a, _ in intervals)) if intervals else 0.0,
        gpu_busy_us=_busy(intervals),
        streams=len({k.stream for k in kernels if k.stream is not None}) or (1 if kernels else 0),
    )


def read_trace(path: str | Path) -> SystemTrace:
    """Reads a Chrome-trace JSON file (``.json`` or gzip-compressed ``.json.gz``)."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            import gzip

            text = gzip.decompress(path.read_bytes()).decode("utf-8")
        else:
            text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: not a JSON trace ({exc})") from None
    return parse(data)


def record(call: Callable[[], object], path: str | Path, warmup: int = 1) -> SystemTrace:
    """Runs ``call`` ``warmup`` times untraced, then once under torch.profiler (CPU and, when
    present, CUDA activity); writes the Chrome trace to ``path`` and returns it parsed."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        call()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        with torch.profiler.record_function(CALL_ANNOTATION):
            call()
        if cuda:
            torch.cuda.synchronize()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return read_trace(path)
