"""Static check of kernel candidates: exploits, forbidden shortcuts and precision downgrades.

``scan(source)`` reads a KernelBench-format candidate (a ``ModelNew`` built on Triton, CUDA/C++
through ``load_inline``, or CuTe DSL) without running it and returns ``Reason`` records;
``detect_backends(source)`` names the kernel backends it uses. The dynamic judge catches what a
static read cannot (unwritten outputs, input mutation, stale caches); this side catches what a run
may miss (patched timers, threads, lazy outputs, reference access, silent fallbacks, TF32).
"""

from loopwise.kernels.check._backends import BACKENDS, detect_backends
from loopwise.kernels.check._codes import CODES, Code
from loopwise.kernels.check._reference import importable
from loopwise.kernels.check._scan import POLICIES, scan

__all__ = ["BACKENDS", "CODES", "POLICIES", "Code", "detect_backends", "importable", "scan"]
