"""Generated KernelBench-format problems: a typed grammar of PyTorch ops, composed 1-6 at a time.

``generate_suite(200, seed=0)`` gives the same 200 problems on every machine; ``write_suite`` writes
them as a KernelBench-shaped folder for ``loopwise kernels bench --kernelbench DIR``.
"""

from loopwise.kernels.generate.ops import CATEGORIES, all_ops
from loopwise.kernels.generate.suite import GeneratedProblem, generate_problem, generate_suite, write_suite

__all__ = ["CATEGORIES", "GeneratedProblem", "all_ops", "generate_problem", "generate_suite", "write_suite"]
