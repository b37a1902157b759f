"""Counts the candidate's own kernel launches inside the sandbox.

A candidate that launches no kernel of its own (no Triton launch, no call into an extension it
compiled) is plain PyTorch, whatever its source defines: a decoy kernel that is never launched, a
reference model called in ``forward``, a ``try``/``except`` that falls back to torch. Counting
happens at the launch paths themselves (Triton's ``JITFunction.run`` and its interpreter twin, a
compiled kernel launched as ``compiled[grid](...)``, functions of modules built by ``load_inline`` /
``load``), so it works on CPU and GPU alike and
costs nothing, unlike a CUDA profiler session. A launch counts only when it returns normally.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections import Counter

COUNTS: Counter = Counter()
_INSTALLED = "_loopwise_counted"
# Called as hook(args, kwargs, result) after every counted launch (the data-flow check listens).
LISTENERS: list = []


def _counted(fn, label: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        if not kwargs.get("warmup", False):
            COUNTS[label] += 1
            for listener in list(LISTENERS):
                listener(args, kwargs, result)
        return result

    setattr(wrapper, _INSTALLED, True)
    return wrapper


def _patch_method(cls, name: str, label: str) -> None:
    original = cls.__dict__.get(name)
    if original is None or getattr(original, _INSTALLED, False):
        return
    setattr(cls, name, _counted(original, label))


class _CountedExtension:
    """Stands in for a compiled extension module; every function called through it is counted."""

    def __init__(self, module, label: str) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_label", label)

    def __getattr__(self, name: str):
        value = getattr(self._module, name)
        if callable(value) and not isinstance(value, type):
            return _counted(value, f"{self._label}.{name}")
        return value

    def __setattr__(self, name: str, value) -> None:
        setattr(self._module, name, value)

    def __dir__(self):
        return dir(self._module)


def count_extension(module, name: str):
    return _CountedExtension(module, f"extension:{name}")


def install() -> None:
    """Hooks Triton's launch paths (compiled and interpreted) when Triton is importable."""
    try:
        from triton.runtime import jit
    except ImportError:
        return
    _patch_method(jit.JITFunction, "run", "triton")
    _count_compiled_launches()
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    _patch_method(interpreter.InterpretedFunction, "run", "triton")


def _count_compiled_launches() -> None:
    """A kernel Triton compiled, launched by the candidate as ``compiled[grid](*args)``: the runner
    that ``CompiledKernel.__getitem__`` returns is counted when it returns. (torch.compile's own
    launchers call the compiled kernel's ``run`` directly, not through this path.)"""
    try:
        from triton.compiler.compiler import CompiledKernel
    except ImportError:
        return
    original = CompiledKernel.__dict__.get("__getitem__")
    if original is None or getattr(original, _INSTALLED, False):
        return

    @functools.wraps(original)
    def getitem(self, grid):
        return _counted(original(self, grid), "triton")

    setattr(getitem, _INSTALLED, True)
    CompiledKernel.__getitem__ = getitem


@contextlib.contextmanager
def through_triton():
    """For its duration, a no-op Triton launch hook is set: a launcher that calls a compiled kernel
    directly while no hook is set (a profiler's), as the compiler seed's files do to save the JIT's
    argument binding, goes through Triton's own launch path instead, where launches are counted."""
    try:
        from triton import knobs

        runtime = knobs.runtime
        hooks = runtime.launch_enter_hook
    except (ImportError, AttributeError):
        yield
        return

    def hook(*_args, **_kwargs):
        return None

    if hasattr(hooks, "add"):  # a chain of hooks (newer Triton)
        hooks.add(hook)
        try:
            yield
        finally:
            hooks.remove(hook)
        return
    runtime.launch_enter_hook = hook
    try:
        yield
    finally:
        runtime.launch_enter_hook = hooks


def reset() -> None:
    COUNTS.clear()


def snapshot() -> dict[str, int]:
    return dict(COUNTS)


# Kernels that come from PyTorch, its libraries or its compiler rather than from the candidate;
# used only when no counted launch happened (CuTe DSL, cupy or torch.ops kernels are not counted).
LIBRARY_KERNEL = re.compile(
    r"(^|\s|::)(at::|at_cuda_detail|c10::|cub::|thrust::|cutlass::Kernel|cublas|cudnn|cask_|xmma|nvjet|"
    r"sm\d+_xmma|ampere_|volta_|turing_|hopper_|gemv2|gemmk1|gemmSN|splitKreduce|implicit_convolve|"
    r"cunn_|elementwise_kernel|vectorized_elementwise|unrolled_elementwise|reduce_kernel|Memcpy|Memset|"
    r"triton_(poi|red|per|tem)_fused|fft|dot_kernel|scal_kernel|cutlass_\d+_|"
    r"\(anonymous namespace\)::(softmax|cunn|upsample|im2col|max_pool|avg_pool))",
    re.IGNORECASE,
)


def is_library_kernel(name: str) -> bool:
    return bool(LIBRARY_KERNEL.search(name))
