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
from pathlib import Path

HERE = Path(__file__).parent
CANDIDATE = HERE.parents[2] / "loopwise" / "kernels" / "examples" / "cute_gemm" / "bf16_gemm_cutlass.py"
NAME = "cutlass_wgmma_bf16"
INSTANTIATE = """
int lw_instantiate(const lw::Element* a, const lw::Element* b, lw::Element* c, void* w, cudaStream_t s) {
  return lw::gemm(a, b, c, 4096, 4096, 4096, w, s) + static_cast<int>(lw::workspace_bytes(4096, 4096, 4096));
}
"""


def kernel_source() -> str:
    """The candidate's KERNEL string, read without importing it (importing builds the extension)."""
    for node in ast.parse(CANDIDATE.read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["KERNEL"]:
            return ast.literal_eval(node.value)
    raise SystemExit(f"no KERNEL string in {CANDIDATE}")


def main() -> int:
    sys.path.insert(0, str(HERE.parents[2]))
    from loopwise.kernels.backends import cutlass_include_dirs

    source = kernel_source()
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / f"{NAME}.cu"
        cu.write_text(source + INSTANTIATE)
        cmd = ["nvcc", "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
               *[f"-I{d}" for d in cutlass_include_dirs()], "-cubin", str(cu), "-o", str(HERE / f"{NAME}.cubin")]
        subprocess.run(cmd, check=True)
        version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    (HERE / f"{NAME}.json").write_text(json.dumps({"kernel_sha256": hashlib.sha256(source.encode()).hexdigest(),
                                                    "nvcc": version, "arch": "sm_90a"}, indent=1) + "\n")
    print(f"wrote {HERE / (NAME + '.cubin')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
