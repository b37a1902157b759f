"""Builds cutlass_wgmma_bf16.cubin from the CUTLASS / CuTe candidate's kernel source
(loopwise/kernels/examples/cute_gemm/bf16_gemm_cutlass.py, its KERNEL string) with nvcc for
sm_90a, without torch: one host function instantiates the GEMM. The json beside it holds the
source's sha256, so the test notices a candidate that changed after the fixture was made.

    python tests/kernels/profile_fixtures/make_cutlass_fixture.py      # needs nvcc (CUDA 12.3+)
"""

import ast
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
CANDIDATE = HERE.parents[2] / "loopwise" / "kernels" / "examples" / "cute_gemm" / "bf16_gemm_cutlass.py"
NAME = "cutlass_wgmma_bf16"
INSTANTIATE = """
int lw_instantiate(const lw::Element* a, const lw::Element* b, lw::Element* c, void* w, cudaStream_t s) {
  return lw::gemm(a, b, c, 4096, 4096, 4096, w, s) + static_cast<int>(lw::workspace_bytes(4096, 4096, 4096));
}
"""


def kernel_string(text: str) -> str:
    """The KERNEL string of a candidate's source, read without importing it (importing builds the
    extension)."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["KERNEL"]:
            return ast.literal_eval(node.value)
    raise SystemExit("no KERNEL string in the candidate")


def kernel_source() -> str:
    """The bundled candidate's KERNEL string."""
    return kernel_string(CANDIDATE.read_text())


def nvcc_cubin(source: str, name: str) -> tuple[float, str]:
    """Compiles ``source`` (a kernel and a host function instantiating it) for sm_90a with the
    CUTLASS headers to ``HERE/name.cubin``; (seconds it took, nvcc's version line)."""
    sys.path.insert(0, str(HERE.parents[2]))
    from loopwise.kernels.backends import cutlass_include_dirs

    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / f"{name}.cu"
        cu.write_text(source)
        cmd = ["nvcc", "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
               *[f"-I{d}" for d in cutlass_include_dirs()], "-cubin", str(cu), "-o", str(HERE / f"{name}.cubin")]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        seconds = time.perf_counter() - t0
    version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    return seconds, version.strip().splitlines()[-1]


def main() -> int:
    source = kernel_source()
    _, version = nvcc_cubin(source + INSTANTIATE, NAME)
    (HERE / f"{NAME}.json").write_text(json.dumps({"kernel_sha256": hashlib.sha256(source.encode()).hexdigest(),
                                                    "nvcc": version, "arch": "sm_90a"}, indent=1) + "\n")
    print(f"wrote {HERE / (NAME + '.cubin')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
