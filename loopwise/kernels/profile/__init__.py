"""Profiling of compiled kernels: ``sass`` (instructions, no GPU needed), ``ncu`` and ``classify``;
``findings`` / ``registry`` / ``tools``: micro-profiling tools that turn them into ranked guidance."""
