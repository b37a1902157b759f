"""The environment a process that runs candidate code gets: an allow list, never a secret.

Candidate code (a sandbox, a compile worker, the profiler's target) sees only what CUDA, Triton,
the compilers (nvcc, gcc, ninja, torch's cpp_extension), Python and the sandbox itself read. A
name that looks like a credential is dropped even when an allowed prefix would let it in
(``TORCH_HUB_TOKEN``, ``CUDA_API_KEY``): what a candidate can read, it can print into its log or
an error message, and from there into a run's store and report.

Two ways in: :func:`sandbox_environ` filters a mapping (for a child started with ``env=``), and
:func:`enter_sandbox` turns the calling process into one that holds only the allowed variables,
for processes forked or spawned with the parent's environment (multiprocessing has no ``env=``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# Exact names: the process, locale and paths, Python, the compilers and loopwise's own sandbox.
ALLOWED_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "LANG", "LANGUAGE",
    "TMPDIR", "TMP", "TEMP", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED", "PYTHONNOUSERSITE",
    "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "VIRTUAL_ENV", "CONDA_PREFIX",
    "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "MAX_JOBS", "XDG_CACHE_HOME",
    # read by loopwise inside a sandbox: its private cache folder and the timing loop's GC switch
    "LOOPWISE_CACHE_DIR", "LOOPWISE_TIMING_GC",
})
# Prefixes: CUDA and the driver, Triton, torch and Inductor, nvcc, the math libraries' threads.
ALLOWED_PREFIXES = (
    "LC_", "CUDA_", "CUDNN_", "CUBLAS_", "CUBLASLT_", "NVIDIA_", "NV_", "NVCC_", "TRITON_",
    "TORCH_", "TORCHINDUCTOR_", "PYTORCH_", "OMP_", "MKL_", "OPENBLAS_", "KMP_",
)
# Names of credentials, whatever their prefix: API keys, tokens, passwords, cloud secrets.
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|PRIVATE|SESSION", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether ``name`` looks like the name of a credential (``OPENAI_API_KEY``, ``HF_TOKEN``)."""
    return bool(_SECRET.search(name))


def is_allowed(name: str) -> bool:
    """Whether a process running candidate code may see the variable ``name``."""
    if is_secret_name(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def sandbox_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowed part of ``environ`` (this process's environment by default)."""
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if is_allowed(name)}


def enter_sandbox(environ: Mapping[str, str] | None = None) -> None:
    """Leaves this process with the allowed part of ``environ`` (default: its own) and nothing else.

    Called first thing in a process that will run candidate code. ``os.environ`` is replaced, and
    so is what ``/proc/self/environ`` shows: the environment the process was started with, which
    the kernel keeps reading from the process's own memory and which changing ``os.environ`` does
    not touch (a forked child even shows its server's).
    """
    kept = sandbox_environ(dict(os.environ) if environ is None else environ)
    os.environ.clear()
    os.environ.update(kept)
    _blank_initial_environ(kept)


def _blank_initial_environ(kept: Mapping[str, str]) -> bool:
    """Zeroes the entries of the start-up environment block that are not in ``kept``.

    Allowed entries stay as they were: the dynamic loader keeps pointers into this block (e.g. to
    LD_LIBRARY_PATH's value) for the libraries it loads later. Returns False where the block cannot
    be found (not Linux, or a kernel that hides the addresses); nothing is changed then.
    """
    bounds = _initial_environ_bounds()
    if bounds is None:
        return False
    start, end = bounds
    try:
        with open("/proc/self/environ", "rb") as fh:
            block = fh.read()
    except OSError:
        return False
    if len(block) > end - start:
        return False
    import ctypes

    offset = 0
    for entry in block.split(b"\0"):
        name = entry.split(b"=", 1)[0].decode("utf-8", errors="replace")
        if entry and name not in kept:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1
    return True


def _initial_environ_bounds() -> tuple[int, int] | None:
    """``env_start`` and ``env_end`` of this process (fields 50 and 51 of ``/proc/self/stat``)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # fields[0] is field 3, the state
    except (OSError, IndexError, ValueError):
        return None
    return (start, end) if 0 < start < end else None
