"""Regenerate the sm_90 cubins the SASS profiler tests read: ``python make_fixtures.py``.

Each kernel is built to show one thing in its SASS, so the tests can check the parser against a
known answer without a GPU or a Triton compile:

* ``vector_add``: contiguous fp32 loads, pointers and length multiples of 16 → ``LDG.E.128``.
* ``strided_gather``: a runtime stride (aligned pointers) → one 32-bit ``LDG.E`` per element.
* ``matmul_fp16`` / ``matmul_bf16`` / ``matmul_tf32``: ``tl.dot`` → ``HGMMA`` with the operand type
  in the opcode (implicit F16, ``.BF16``, ``.TF32``).
* ``matmul_fp32_ieee``: ``tl.dot`` in full fp32 → no tensor core, ``FFMA`` only.
* ``matmul_spill``: that fp32 matmul capped at 32 registers per thread while its 64×64
  accumulator alone needs 32 per thread → ``STL`` / ``LDL`` spills.

``expected.json`` keeps what Triton reported besides the cubin (launch shared memory, ptxas spills),
since the cubin alone does not record them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Line tables would triple the cubins' size and change no instruction.
os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from loopwise.kernels.profile.sass_tools import compile_triton, triton_resources  # noqa: E402


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def strided_gather(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask) * 2.0, mask=mask)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
           PRECISION: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def _matmul_signature(dtype: str) -> dict[str, str]:
    return {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "c_ptr": "*fp32", "M": "i32", "N": "i32",
            "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "PRECISION": "constexpr"}


_TILE = {"BM": 64, "BN": 64, "BK": 32}
# As a launch with sizes that are multiples of 16 would specialize them: rows start aligned.
_MM_ALIGNED = {"aligned": ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K")}
FIXTURES = {
    "vector_add": (vector_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                "BLOCK": "constexpr"}, {"BLOCK": 1024},
                   {"aligned": ("x_ptr", "y_ptr", "out_ptr", "n")}),
    "strided_gather": (strided_gather, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "stride": "i32",
                                        "BLOCK": "constexpr"}, {"BLOCK": 1024}, {}),
    "matmul_fp16": (matmul, _matmul_signature("fp16"), {**_TILE, "PRECISION": "ieee"}, _MM_ALIGNED),
    "matmul_bf16": (matmul, _matmul_signature("bf16"), {**_TILE, "PRECISION": "ieee"}, _MM_ALIGNED),
    "matmul_tf32": (matmul, _matmul_signature("fp32"), {**_TILE, "PRECISION": "tf32"}, _MM_ALIGNED),
    "matmul_fp32_ieee": (matmul, _matmul_signature("fp32"), {**_TILE, "PRECISION": "ieee"}, _MM_ALIGNED),
    "matmul_spill": (matmul, _matmul_signature("fp32"), {**_TILE, "PRECISION": "ieee"}, {**_MM_ALIGNED, "maxnreg": 32}),
}


def main() -> None:
    """Compile every fixture for sm_90 and write ``<name>.cubin`` and ``expected.json``."""
    expected: dict[str, dict[str, object]] = {}
    for name, (kernel, signature, constexprs, options) in FIXTURES.items():
        compiled = compile_triton(kernel, signature, constexprs, num_warps=4, arch=90, **options)
        (HERE / f"{name}.cubin").write_bytes(compiled.asm["cubin"])
        resources = triton_resources(compiled)
        expected[name] = {"function": compiled.metadata.name, "num_warps": 4, **options,
                          "resources": resources.model_dump(mode="json")}
        print(f"{name}: {len(compiled.asm['cubin'])} bytes, {resources}")
    (HERE / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


if __name__ == "__main__":
    main()
