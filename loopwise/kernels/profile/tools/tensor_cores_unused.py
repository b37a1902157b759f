"""Tensor cores unused: a matmul-shaped kernel that multiplies on the CUDA cores (FFMA).

Why it matters: on an H200 the tensor cores multiply tf32 about 8x and bf16 about 16x faster than
the fp32 FMA pipes (``FP32_TFLOPS``, ``TF32_TFLOPS`` and ``BF16_TFLOPS`` below are the H200's
measured ceilings: docs/log/2026-11-29.md, "Device ceilings").
A matmul without ``HGMMA`` / ``HMMA`` instructions leaves nearly all of that on the table.

What to do depends on the precision policy. Under ``fp32`` a plain tf32 product loses accuracy
(10-bit mantissa), so the advice is a compensated product on tensor cores: 3xTF32 (each operand
split into a tf32 high part and remainder, three products summed; close to fp32 accuracy at a
third of the tf32 rate) or bf16x3. Under ``relaxed`` tf32 / bf16 tensor cores are fine as they are.
When the inputs are already fp16 / bf16, their own tensor-core path loses nothing under either policy.

Fires only with the ``matmul_shaped`` hint (SASS alone cannot tell a matmul from a big elementwise
FMA chain), no tensor-core instruction, and at least 16 FFMA in the code. Score: the fraction of
time the suggested path would save at the measured rates, ``1 - fp32 / rate`` (0.63 for 3xTF32,
0.88 for tf32, 0.94 for fp16/bf16).
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool

FP32_TFLOPS = 51.4
TF32_TFLOPS = 420.8
BF16_TFLOPS = 849.5
MIN_FFMA = 16


class TensorCoresUnusedTool(Tool):
    name = "tensor_cores_unused"
    needs = frozenset({"sass"})
    applies_to = frozenset({"compute_bound", "underutilized"})
    summary = "matmul-shaped kernel running on FFMA instead of tensor cores"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        k = inp.sass
        assert k is not None
        ffma = k.opcodes.get("FFMA", 0)
        if not inp.hints.matmul_shaped or k.tensor_core_instructions > 0 or ffma < MIN_FFMA:
            return []
        policy, dtype = inp.hints.precision, inp.hints.input_dtype
        moves: list[Move]
        if dtype in ("fp16", "bf16"):
            rate, path, moves = BF16_TFLOPS, f"{dtype} tensor cores on the {dtype} inputs as they are", \
                [StructuralMove("use_tensor_cores")]
        elif policy == "fp32":
            rate, path, moves = TF32_TFLOPS / 3, "3xTF32 (or bf16x3) tensor-core emulation, which keeps fp32 " \
                "accuracy,", [StructuralMove("use_tf32x3"), StructuralMove("use_bf16x3")]
        else:
            rate, path, moves = TF32_TFLOPS, "tf32 or bf16 tensor cores, which the relaxed policy allows,", \
                [StructuralMove("use_tensor_cores")]
        score = 1 - FP32_TFLOPS / rate
        evidence: dict[str, float | int | str | bool] = {
            "ffma": ffma, "fp32_instructions": k.families.get("fp32", 0), "instructions": k.instructions,
            "tensor_core_instructions": 0, "fp32_tflops": FP32_TFLOPS, "suggested_path_tflops": round(rate, 1),
            "policy": policy,
        }
        guidance = (f"This matmul-shaped kernel has {ffma} FFMA and no tensor-core instruction, so it is held to "
                    f"the {FP32_TFLOPS} TFLOP/s of the fp32 pipes, and {path} would raise that ceiling to "
                    f"{rate:.0f} TFLOP/s ({rate / FP32_TFLOPS:.1f}x).")
        return [Finding.make(self.name, guidance, evidence, score, moves)]


TOOL = TensorCoresUnusedTool()
