"""Builds expert_cutlass_bf16.cubin, expert_3xtf32.cubin, expert_cutlass_tf32.cubin,
expert_3xtf32_splitk.cubin and expert_1xtf32_splitk.cubin: the expert proposer's CUTLASS variants
of the matrix product, rendered with their default moves for fixed problems (bf16 and fp32, C = A @
B, 4096 x 4096 x 4096; the split-K ones 256 x 256 out of K = 524288, KernelBench L1/6's shape,
where the default splits K 64 ways), their KERNEL strings compiled with nvcc for sm_90a without torch (one host function
instantiates each GEMM). The json beside each cubin holds the kernel's sha256, the
moves and the compile time, so the tests notice a template that changed after the fixture was made.

    python tests/kernels/profile_fixtures/make_expert_cutlass_fixture.py      # needs nvcc (CUDA 12.3+)
"""

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
# The KERNEL reader and the nvcc build of the bundled candidate's fixture serve these too.
_spec = importlib.util.spec_from_file_location("make_cutlass_fixture", HERE / "make_cutlass_fixture.py")
_maker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_maker)
SIZE = 4096
SQUARE = (SIZE, SIZE, SIZE)
FIXTURES = {"expert_cutlass_bf16": ("matmul_cutlass", "bfloat16", SQUARE),
            "expert_3xtf32": ("matmul_3xtf32", "float32", SQUARE),
            "expert_cutlass_tf32": ("matmul_cutlass_tf32", "float32", SQUARE),
            "expert_3xtf32_splitk": ("matmul_3xtf32", "float32", (256, 256, 524288)),
            "expert_1xtf32_splitk": ("matmul_1xtf32", "float32", (256, 256, 524288))}


def _instantiation(kind: str, shape: tuple[int, int, int]) -> str:
    """A host function that instantiates the kernel for the fixed problem (``device`` 0 for WGMMA)."""
    m, n, k = shape
    device = ", 0" if kind in ("matmul_cutlass", "matmul_cutlass_tf32") else ""
    return f"""
int lw_instantiate(const lw::Element* a, const lw::Element* b, lw::Element* c, void* w, cudaStream_t s) {{
  auto args = lw::arguments(a, {k}, b, {n}, c, {n}, {m}, {n}, {k}{device});
  return lw::run(args, w, s) + static_cast<int>(lw::Gemm::get_workspace_size(args));
}}
"""


def pattern(name: str):
    """The matrix product (C = A @ B) fixture ``name`` is rendered for."""
    from loopwise.kernels.expert.pattern import Pattern

    _, dtype, (m, n, k) = FIXTURES[name]
    return Pattern("matmul", inputs=2, ops=("matmul",),
                   params=(("trans_a", False), ("trans_b", False), ("m", m), ("n", n), ("k", k), ("dtype", dtype)))


def kernel_source(name: str) -> str:
    """The KERNEL string of fixture ``name``'s candidate as the template renders it now."""
    from loopwise.kernels.expert.generate import render

    return _maker.kernel_string(render(pattern(name), {"template": FIXTURES[name][0]}))


def build(name: str) -> dict:
    """Compiles fixture ``name`` next to this file; what its json records."""
    from loopwise.kernels.expert.generate import default_moves

    kind, dtype, shape = FIXTURES[name]
    source = kernel_source(name)
    seconds, version = _maker.nvcc_cubin(source + _instantiation(kind, shape), name)
    record = {"kernel_sha256": hashlib.sha256(source.encode()).hexdigest(), "template": kind,
              "moves": default_moves(pattern(name), kind), "problem": f"C = A @ B, {'x'.join(map(str, shape))}, {dtype}",
              "nvcc": version, "arch": "sm_90a", "compile_s": round(seconds, 1)}
    (HERE / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(names: list[str]) -> int:
    sys.path.insert(0, str(HERE.parents[2]))
    for name in names or list(FIXTURES):
        record = build(name)
        print(f"wrote {HERE / (name + '.cubin')} in {record['compile_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
