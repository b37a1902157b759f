"""Candidate backends: CUDA C++ through ``load_inline`` (cached by source hash), CUDA with
CUTLASS/CuTe C++ headers, Triton, and the CuTe DSL when installed.

``load_inline`` is wrapped inside the sandbox so that every candidate gets:
- a build directory keyed by the hash of its sources (an unchanged kernel never recompiles, and two
  candidates that both call their extension ``my_ext`` never collide);
- the CUTLASS/CuTe include paths from the ``nvidia-cutlass`` wheel when its sources include them;
- ``-gencode=arch=compute_90a,code=sm_90a`` on Hopper for CUTLASS sources (wgmma needs sm_90a);
- a build for the one architecture of the device, not for every architecture torch knows.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple

from loopwise.kernels.evaluate import launches

CUTLASS_INCLUDE = re.compile(r"#\s*include\s*[<\"](cute|cutlass)/")
_WRAPPED = "_loopwise_wrapped"


def detect(source: str) -> str:
    """The main backend of a candidate source: cutlass, cuda, cpp, triton, cute_dsl or pytorch
    (the static scan's detection, reduced to one name)."""
    from loopwise.kernels.check import detect_backends

    found = detect_backends(source)
    return next((name for name in ("cutlass", "cuda", "cpp", "triton", "cute_dsl") if name in found), "pytorch")


def cutlass_include_dirs() -> list[str]:
    """CUTLASS/CuTe C++ header folders shipped in the ``nvidia-cutlass`` wheel (empty if absent)."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0]) / "source"
    dirs = [root / "include", root / "tools" / "util" / "include"]
    return [str(d) for d in dirs if d.is_dir()]


def source_key(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
    return h.hexdigest()[:16]


def device_arch(device: str) -> str | None:
    """``"9.0"`` style arch of a CUDA device, None on CPU."""
    if not device.startswith("cuda"):
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(torch.device(device))
    return f"{major}.{minor}"


# Without a CUDA device (arch None) nvcc has no target and the kernels nothing to run on: say so
# instead of the build's own first complaint (CUDA_HOME not set, nvcc not found).
NO_GPU_FOR_CUDA = "CUDA candidates need an NVIDIA GPU: this judge runs on the CPU (C++ and Triton candidates run here)"


def _wrap_load_inline(arch: str | None) -> None:
    import torch.utils.cpp_extension as ext

    original = ext.load_inline
    if getattr(original, _WRAPPED, False):
        return

    def load_inline(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        if arch is None and cuda_sources:
            raise RuntimeError(NO_GPU_FOR_CUDA)
        text = "".join(cpp_sources if isinstance(cpp_sources, list) else [cpp_sources or ""])
        text += "".join(cuda_sources if isinstance(cuda_sources, list) else [cuda_sources or ""])
        if CUTLASS_INCLUDE.search(text):
            kwargs["extra_include_paths"] = list(kwargs.get("extra_include_paths") or []) + cutlass_include_dirs()
            flags = list(kwargs.get("extra_cuda_cflags") or [])
            if arch == "9.0":
                flags.append("-gencode=arch=compute_90a,code=sm_90a")
            flags += ["-std=c++17", "--expt-relaxed-constexpr"]
            kwargs["extra_cuda_cflags"] = flags
        key = source_key(text, kwargs.get("extra_cuda_cflags"), kwargs.get("extra_cflags"), arch)
        if not kwargs.get("build_directory"):
            # The module keeps its name (a literal PYBIND11_MODULE(name, m) must still match); the
            # build folder carries the source hash, which is what makes the cache safe to share.
            kwargs["build_directory"] = _build_dir(f"{name}_{key}")
        module = original(name, cpp_sources, cuda_sources, *args, **kwargs)
        return launches.count_extension(module, name)

    def load(name, sources, *args, **kwargs):
        files = [sources] if isinstance(sources, str) else sources
        if arch is None and any(str(src).endswith(".cu") for src in files):
            raise RuntimeError(NO_GPU_FOR_CUDA)
        return launches.count_extension(original_load(name, sources, *args, **kwargs), name)

    original_load = ext.load
    setattr(load_inline, _WRAPPED, True)
    ext.load_inline = load_inline
    ext.load = load


def _build_dir(folder: str) -> str:
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not root:
        from torch.utils.cpp_extension import _get_build_directory

        return _get_build_directory(folder, verbose=False)
    path = os.path.join(root, folder)
    os.makedirs(path, exist_ok=True)
    return path


def clear_stale_locks(extensions_dir: str, since: float) -> int:
    """Removes build locks left by a sandbox killed mid-compile (created after ``since``)."""
    removed = 0
    for lock in Path(extensions_dir).glob("*/lock"):
        try:
            if lock.stat().st_mtime >= since:
                lock.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask, e.g. under taskset), not the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 2


def pytorchs_libdevice() -> str | None:
    """The CUDA toolkit's libdevice (CUDA's math library as LLVM bitcode) where the toolkit torch
    finds is the CUDA release torch was built with; None elsewhere.

    PyTorch's own kernels link that release's libdevice. Triton links the copy it bundles, which
    can be an older release's (Triton 3.6's erff has other coefficients than CUDA 13.0's), so a
    Triton kernel's erf can differ from PyTorch's in the last bit for some inputs, and an index
    taken after it can break a near tie the other way."""
    import torch
    from torch.utils import cpp_extension

    home, built_with = cpp_extension.CUDA_HOME, torch.version.cuda
    if not home or not built_with:
        return None
    path = Path(home, "nvvm", "libdevice", "libdevice.10.bc")
    try:
        match = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", Path(home, "include", "cuda.h").read_text(errors="replace"))
        if not match or not path.is_file() or not os.access(path, os.R_OK):
            return None
        number = int(match.group(1))  # 13000 for 13.0
        same = (number // 1000, number % 1000 // 10) == tuple(int(p) for p in built_with.split(".")[:2])
    except (OSError, ValueError):
        return None
    return str(path) if same else None


def link_pytorchs_libdevice() -> None:
    """Has Triton link :func:`pytorchs_libdevice` in the kernels this process compiles from now
    on, unless the user named a libdevice (``TRITON_LIBDEVICE_PATH``) or there is none."""
    if not os.environ.get("TRITON_LIBDEVICE_PATH"):
        libdevice = pytorchs_libdevice()
        if libdevice:
            os.environ["TRITON_LIBDEVICE_PATH"] = libdevice


def prepare_environment(hints: dict, device: str) -> None:
    """Run in the sandbox (or a compile worker) before the candidate's module is imported. Where
    a CUDA arch is known, Triton links PyTorch's libdevice (:func:`link_pytorchs_libdevice`)."""
    arch = hints.get("arch") or device_arch(device)
    if arch and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    if arch:
        link_pytorchs_libdevice()
    os.environ.setdefault("MAX_JOBS", str(hints.get("max_jobs", usable_cpus())))
    _wrap_load_inline(arch)


def _no_cuda_runtime_notice(record) -> bool:
    """False for torch's "No CUDA runtime is found, using CUDA_HOME=..." warning, which a compile
    worker triggers on purpose (it hides the GPU) and which would only be noise in the user's log."""
    return not str(record.msg).startswith("No CUDA runtime is found")


COMPILER_OUTPUT_CHARS = 20000  # the tail of a failed build's output that is kept (the errors are at its end)


class Build(NamedTuple):
    """One candidate's parallel build. ``compiler_output`` is set only for a compiler error (the
    build ran and failed, as it would in the candidate's sandbox); a build that timed out or whose
    worker died has none, and is left to the sandbox."""

    ok: bool
    message: str
    compiler_output: str = ""


def _compile_one(source: str, extensions_dir: str, arch: str | None, workdir: str) -> Build:
    """Imports a candidate with no GPU visible, so that ``load_inline`` at import time builds it."""
    import logging
    import time
    import traceback

    from loopwise.kernels.evaluate.environment import enter_sandbox

    enter_sandbox()  # the candidate's module runs here: no secret in its environment
    logging.getLogger("torch.utils.cpp_extension").addFilter(_no_cuda_runtime_notice)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TORCH_EXTENSIONS_DIR"] = extensions_dir
    if arch:
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    prepare_environment({"arch": arch, "max_jobs": 1}, "cpu")
    path = Path(workdir) / f"candidate_{source_key(source)}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    t0 = time.perf_counter()
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - reported, never raised
        text = traceback.format_exc()
        if "Error building extension" in text or "error:" in text.lower() and "ninja" in text.lower():
            first = str(exc).splitlines()[0] if str(exc) else ""
            return Build(False, f"{type(exc).__name__}: {first}", text[-COMPILER_OUTPUT_CHARS:])
        return Build(True, f"import needs a GPU; compile deferred ({type(exc).__name__})")
    return Build(True, f"built in {time.perf_counter() - t0:.1f}s")


def precompile(sources: list[str], extensions_dir: str, arch: str | None, jobs: int | None = None,
               timeout_s: float = 600.0) -> list[Build]:
    """Builds the ``load_inline`` extensions of many candidates in parallel on CPU cores.

    Each candidate is imported in a fresh worker process with no GPU visible; a build that fails,
    hangs or kills its worker is reported for that candidate alone, never raised: a compiler error
    with the compiler's output (the judge reports it without building again), a hang or a dead
    worker without (its sandbox then builds it again and judges what happens).
    """
    import multiprocessing as mp
    import tempfile
    from concurrent.futures import TimeoutError as FutureTimeout

    workdir = tempfile.mkdtemp(prefix="loopwise-compile-")
    jobs = jobs or max(1, usable_cpus() - 1)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"), max_tasks_per_child=1)
    futures = [pool.submit(_compile_one, s, extensions_dir, arch, workdir) for s in sources]
    results: list[tuple[bool, str]] = []
    try:
        for future in futures:
            try:
                results.append(future.result(timeout=timeout_s))
            except FutureTimeout:
                results.append(Build(False, f"no build after {timeout_s:.0f}s; left to the sandbox"))
            except Exception as exc:  # noqa: BLE001 - a worker died: that candidate's problem
                results.append(Build(False, f"build worker failed ({type(exc).__name__}); left to the sandbox"))
    finally:
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()  # a hung build must not outlive the command
        pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(workdir, ignore_errors=True)  # the candidates' module copies; builds stay in extensions_dir
    return results
