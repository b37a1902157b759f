"""The problems, candidates and input sizes of the KernelBench agreement benchmark.

Shared by ``check_candidates.py`` (CPU, tiny sizes) and ``kernelbench_agreement.py`` (GPU). Sizes
are changed by appending assignments to the problem's source, after its own: ``get_inputs()``
reads the module-level names when it is called, so the problem's code is otherwise untouched.

Why reduced sizes by default: at KernelBench v0.1 sizes every activation problem here takes a
4096 x 393216 fp32 input (6.4 GB), and one ``torch.rand`` draw of it takes ~7 s on the CPU;
KernelBench draws 7 times per evaluation. At those sizes softmax rows of 393216 values give
outputs near 2.5e-6, below the 1e-4 absolute tolerance, so even an all-zero output passes.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELBENCH = REPO / "third_party" / "KernelBench"
LEVEL1 = KERNELBENCH / "KernelBench" / "level1"
CANDIDATES = Path(__file__).resolve().parent / "candidates"

PROBLEMS: tuple[str, ...] = (
    "19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh", "23_Softmax", "25_Swish", "26_GELU_",
    "29_Softplus", "30_Softsign", "32_HardTanh", "5_Matrix_scalar_multiplication",
    "1_Square_matrix_multiplication_",
)
KINDS: tuple[str, ...] = ("correct", "wrong", "exploit")

_ACTIVATIONS = ("19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh", "25_Swish", "26_GELU_",
                "29_Softplus", "30_Softsign", "32_HardTanh")

# GPU runs: 32 M fp32 elements (128 MB) per input, twice the H200's L2, so timings are DRAM-bound.
# The matmul keeps its official N = 4096.
REDUCED: dict[str, dict[str, int]] = {
    **{stem: {"batch_size": 4096, "dim": 8192} for stem in _ACTIVATIONS},
    "23_Softmax": {"batch_size": 32768, "dim": 1024},
    "5_Matrix_scalar_multiplication": {"M": 8192, "N": 4096},
    "1_Square_matrix_multiplication_": {},
}

# CPU checks under TRITON_INTERPRET=1: same ranks, sizes that are not multiples of the block sizes.
TINY: dict[str, dict[str, int]] = {
    **{stem: {"batch_size": 16, "dim": 1000} for stem in _ACTIVATIONS},
    "23_Softmax": {"batch_size": 8, "dim": 5000},
    "5_Matrix_scalar_multiplication": {"M": 37, "N": 1000},
    "1_Square_matrix_multiplication_": {"N": 150},
}

SIZES = {"official": {stem: {} for stem in PROBLEMS}, "reduced": REDUCED, "tiny": TINY}


def official_source(stem: str) -> str:
    return (LEVEL1 / f"{stem}.py").read_text(encoding="utf-8")


def resized_source(source: str, sizes: dict[str, int]) -> str:
    """``source`` with module-level size names reassigned at its end."""
    if not sizes:
        return source
    for name in sizes:
        if not re.search(rf"^{re.escape(name)}\s*=", source, re.MULTILINE):
            raise KeyError(f"the problem has no module-level {name!r} to resize")
    lines = [f"{name} = {value!r}" for name, value in sizes.items()]
    return (source.rstrip("\n") + "\n\n\n# Input sizes changed by loopwise bench/agreement_set.py\n"
            + "\n".join(lines) + "\n")


def problem_source(stem: str, mode: str) -> str:
    return resized_source(official_source(stem), SIZES[mode][stem])


def write_problem(stem: str, mode: str, root: Path) -> Path:
    """Writes the (resized) problem to ``root/level1/<stem>.py`` so it keeps its KernelBench name."""
    path = root / "level1" / f"{stem}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = problem_source(stem, mode)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def candidate_path(stem: str, kind: str) -> Path:
    return CANDIDATES / f"{stem}__{kind}.py"
