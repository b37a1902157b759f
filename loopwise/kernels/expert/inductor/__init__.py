"""The compiler-seeded root: Inductor's own code for a problem as a standalone candidate.

:mod:`extract` runs torch.compile once on the device and records Inductor's module, its kernels
and their autotuned launches; :mod:`standalone` writes that record out as a ``ModelNew`` file that
launches the kernels itself (no torch.compile at run time), under moves of its own (other launch
configurations, a CUDA graph); :mod:`seed` runs the extraction in a process of its own.
"""
