"""Profiling of compiled kernels: ``sass`` (instructions, no GPU needed), ``ncu`` and ``classify``."""
