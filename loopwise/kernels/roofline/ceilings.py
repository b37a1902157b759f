"""Measured hardware ceilings: copy bandwidth and matmul rates, cached per device and torch version.

We measure rather than read datasheets because a floor that the hardware can never reach would
let physically impossible times through (a torch copy stays below the datasheet bandwidth: the
H200's figures are in docs/log/2026-11-29.md, "Device ceilings").
"""

from __future__ import annotations

import json
import logging
import platform
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loopwise.core.cache import CACHE_ENV, cache_root
from loopwise.core.files import write_atomic

__all__ = ["CACHE_ENV", "Ceilings", "cache_path", "device_name", "load_or_measure", "measure_ceilings", "read_ceilings"]
logger = logging.getLogger(__name__)

# 2: each rate from its fastest trial (1 took the median, which a second process on the GPU could
# drag to a third of the peak); a cache of schema 1 is measured over.
SCHEMA_VERSION = 2
# (copy bytes, fp32/tf32 GEMM n, bf16 GEMM n): big enough on a GPU to reach steady state; small
# on a CPU, where these numbers only exercise the code path. A CPU without bf16 units runs a bf16
# product some 40x slower than fp32 (0.19 s for a 512 cube on the 2-core CI machine, timed 13
# times), hence the smaller bf16 cube there: each judge with a fresh cache measures these.
_SIZES = {"cuda": (1 << 30, 4096, 8192), "cpu": (64 << 20, 512, 256)}


class Ceilings(BaseModel):
    """Peak rates of one device, as measured on random data.

    Attributes:
        device: the device's name, e.g. ``NVIDIA H200``.
        bandwidth_gbs: device-to-device copy, bytes read plus bytes written per second, in GB/s.
        fp32_tflops: fp32 GEMM with TF32 off (SGEMM).
        tf32_tflops: fp32 GEMM with TF32 allowed.
        bf16_tflops: bf16 GEMM.
        l2_bytes: last-level cache size (L2 on a GPU).
        measured_at: ISO 8601 time of the measurement.
        versions: torch, CUDA and Python versions the numbers were taken with.
        method: ``cuda_event`` or ``host_clock``.
        sizes: problem sizes used (``copy_bytes``, ``gemm_n``, ``bf16_n``).
    """

    model_config = ConfigDict(frozen=True)

    device: str
    bandwidth_gbs: float = Field(gt=0)
    fp32_tflops: float = Field(gt=0)
    tf32_tflops: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    l2_bytes: int = Field(ge=0)
    measured_at: str
    versions: dict[str, str] = Field(default_factory=dict)
    method: str = "cuda_event"
    sizes: dict[str, int] = Field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION


def measure_ceilings(
    device: str = "cuda",
    *,
    copy_bytes: int | None = None,
    gemm_n: int | None = None,
    bf16_n: int | None = None,
    trials: int = 10,
    warmup: int = 3,
) -> Ceilings:
    """Measures copy bandwidth and fp32 / TF32 / bf16 matmul rates on one device.

    Each quantity is timed by the fastest of ``trials`` calls after ``warmup`` calls (CUDA events
    on a GPU, the host clock on a CPU): work of another process can slow a trial, never speed one
    up, and the floor built on these rates must not exceed what the device can do. The TF32
    setting is restored afterwards.

    Args:
        device: ``cuda``, ``cuda:N`` or ``cpu``.
        copy_bytes: size of the copied buffer (default 1 GiB on a GPU, 64 MiB on a CPU).
        gemm_n: n of the n x n x n fp32 and TF32 matmuls (default 4096 / 512).
        bf16_n: n of the bf16 matmul (default 8192 / 512).
        trials: timed calls per quantity.
        warmup: untimed calls before them.

    Returns:
        The measured ceilings.
    """
    import torch

    dev = _resolve(device)
    default_copy, default_gemm, default_bf16 = _SIZES["cuda" if dev.type == "cuda" else "cpu"]
    sizes = {"copy_bytes": copy_bytes or default_copy, "gemm_n": gemm_n or default_gemm,
             "bf16_n": bf16_n or default_bf16}

    def best_ms(fn: Callable[[], Any]) -> float:
        return _best_ms(fn, dev, trials, warmup)

    bandwidth = _copy_gbs(dev, sizes["copy_bytes"], best_ms)
    with _tf32(False):
        fp32 = _matmul_tflops(dev, torch.float32, sizes["gemm_n"], best_ms)
    with _tf32(True):
        tf32 = _matmul_tflops(dev, torch.float32, sizes["gemm_n"], best_ms)
    bf16 = _matmul_tflops(dev, torch.bfloat16, sizes["bf16_n"], best_ms)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return Ceilings(
        device=device_name(str(dev)), bandwidth_gbs=bandwidth, fp32_tflops=fp32, tf32_tflops=tf32,
        bf16_tflops=bf16, l2_bytes=_l2_bytes(dev), measured_at=datetime.now(timezone.utc).isoformat(),
        versions=_versions(), method="cuda_event" if dev.type == "cuda" else "host_clock", sizes=sizes,
    )


def load_or_measure(device: str = "cuda", *, refresh: bool = False, **measure_kwargs: Any) -> Ceilings:
    """Returns cached ceilings for this device and torch version, measuring them on a miss.

    The cache is ``$LOOPWISE_CACHE_DIR/ceilings/<device>-torch<version>.json``, by default under
    ``~/.cache/loopwise``. A cache file :func:`read_ceilings` refuses is measured over.

    Args:
        device: ``cuda``, ``cuda:N`` or ``cpu``.
        refresh: measure even when a cache file exists.
        **measure_kwargs: passed to :func:`measure_ceilings` (sizes, trials).

    Returns:
        The ceilings.
    """
    path = cache_path(device)
    if not refresh and (cached := read_ceilings(path)) is not None:
        return cached
    ceilings = measure_ceilings(device, **measure_kwargs)
    write_atomic(path, ceilings.model_dump_json(indent=2))  # a concurrent reader never sees half a file
    return ceilings


def read_ceilings(path: Path) -> Ceilings | None:
    """The ceilings a file holds, or None where it holds none of this schema: absent, unreadable,
    or written under another :data:`SCHEMA_VERSION` (named in the file; one that names none is
    older than the field), whose numbers were taken another way. Every reader of a ceilings file
    goes through here."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    except UnicodeDecodeError as error:  # a torn or foreign file: unreadable like one that is not JSON
        logger.warning("ignoring unreadable ceilings file %s: %s", path, error)
        return None
    try:
        data = json.loads(text)
        schema = data.get("schema_version") if isinstance(data, dict) else None
        if schema != SCHEMA_VERSION:
            logger.info("ceilings file %s has schema %s, not %s: not used", path, schema, SCHEMA_VERSION)
            return None
        return Ceilings.model_validate(data)
    except (ValueError, ValidationError) as error:
        logger.warning("ignoring unreadable ceilings file %s: %s", path, error)
        return None


def cache_path(device: str = "cuda") -> Path:
    """Where :func:`load_or_measure` keeps the ceilings of ``device``."""
    import torch

    base = cache_root()
    stem = _sanitize(f"{device_name(device)}-torch{torch.__version__}")
    return base / "ceilings" / f"{stem}.json"


def device_name(device: str = "cuda") -> str:
    """The marketing name of a GPU (``NVIDIA H200``) or the CPU model name."""
    dev = _resolve(device)
    if dev.type == "cuda":
        import torch

        return torch.cuda.get_device_name(dev)
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _resolve(device: str) -> Any:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"ceilings are measured on cuda or cpu, not {device!r}")
    return dev


def _best_ms(fn: Callable[[], Any], dev: Any, trials: int, warmup: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    if dev.type != "cuda":
        times = []
        for _ in range(trials):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return min(times)
    with torch.cuda.device(dev):
        torch.cuda.synchronize()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(trials)]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
    return min(start.elapsed_time(end) for start, end in pairs)


def _copy_gbs(dev: Any, nbytes: int, best_ms: Callable[[Callable[[], Any]], float]) -> float:
    import torch

    src = torch.rand(max(1, nbytes // 4), device=dev)
    dst = torch.empty_like(src)
    ms = best_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def _matmul_tflops(dev: Any, dtype: Any, n: int, best_ms: Callable[[Callable[[], Any]], float]) -> float:
    import torch

    a = torch.rand(n, n, device=dev, dtype=dtype)
    b = torch.rand(n, n, device=dev, dtype=dtype)
    out = torch.empty(n, n, device=dev, dtype=dtype)
    ms = best_ms(lambda: torch.mm(a, b, out=out))
    return 2 * n**3 / (ms * 1e-3) / 1e12


@contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    """Sets cuBLAS TF32 for fp32 matmuls and restores the caller's setting, in its own API."""
    import torch

    matmul = torch.backends.cuda.matmul
    try:
        old: Any = matmul.allow_tf32
        attribute, value = "allow_tf32", enabled
    except RuntimeError:
        # The caller used the newer fp32_precision API; reading the legacy flag then raises.
        old = matmul.fp32_precision
        attribute, value = "fp32_precision", "tf32" if enabled else "ieee"
    setattr(matmul, attribute, value)
    try:
        yield
    finally:
        setattr(matmul, attribute, old)


def _l2_bytes(dev: Any) -> int:
    if dev.type == "cuda":
        import torch

        return int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0))
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text(encoding="utf-8").strip()
        except OSError:
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", text)
        if match:
            sizes.append(int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)])
    return max(sizes, default=0)


def _versions() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__, "cuda": torch.version.cuda or "", "python": platform.python_version()}


def _sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_")
