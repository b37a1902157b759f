"""Tensor-core precision path: operands of a type the precision policy or the inputs do not call for.

The rules, per operand type of the kernel's ``HGMMA`` / ``HMMA`` / ... instructions:

Either policy, known fp16 / bf16 inputs
    Operands of the inputs' own type are right. tf32 operands are lossless for them but waste half
    the tensor-core rate on an upcast (score 0.5, one minus the measured tf32 over bf16 rate).
``fp32`` policy (results must keep fp32 accuracy)
    Any other tf32, fp16, bf16, fp8 or int operand is a precision violation (score 1.0, high): it
    rounds away mantissa bits the policy requires. 3xTF32 emulation or a
    plain fp32 product are the remedies. 3xTF32 itself shows as tf32 ``HGMMA`` in SASS, so a
    candidate whose source asks for it (``ProblemHints.compensated``, set by the profiler from the
    source) is not reported; without that hint the tool cannot tell, and says so.
``relaxed`` policy (tf32 / bf16 / fp16 allowed)
    fp8 or integer operands are still a violation (score 1.0). With known fp16 / bf16 inputs,
    bf16 operands for fp16 inputs drop 3 mantissa bits (score 0.4) and fp16 operands for bf16
    inputs overflow past 65504 (score 0.6). With fp32 or unknown inputs, tf32 / fp16 / bf16 are fine.
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools.tensor_cores_unused import BF16_TFLOPS, TF32_TFLOPS

_DTYPE_OPERAND = {"fp16": "F16", "bf16": "BF16"}
_RELAXED_OK = frozenset({"TF32", "F16", "BF16", "F64"})
VIOLATION = 1.0
UPCAST = 1 - TF32_TFLOPS / BF16_TFLOPS
MANTISSA_LOSS = 0.4
OVERFLOW_RISK = 0.6


class TensorCorePrecisionTool(Tool):
    name = "tensor_core_precision"
    needs = frozenset({"sass"})
    applies_to = frozenset({"memory_bound", "compute_bound", "latency_bound", "underutilized"})
    summary = "tensor-core operand precision against the precision policy and the input type"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        k = inp.sass
        assert k is not None
        policy, dtype = inp.hints.precision, inp.hints.input_dtype
        native = _DTYPE_OPERAND.get(dtype or "")
        out = []
        for operand, count in sorted(k.tensor_core_inputs.items()):
            verdict = self._judge(operand, policy, dtype, native, inp.hints.compensated)
            if verdict is None:
                continue
            score, problem, moves = verdict
            evidence: dict[str, float | int | str | bool] = {
                "operand_type": operand, "instructions": count,
                "tensor_core_instructions": k.tensor_core_instructions, "policy": policy,
                "input_dtype": dtype or "unknown",
            }
            guidance = (f"{count} of the kernel's {k.tensor_core_instructions} tensor-core instructions take "
                        f"{operand} operands under the {policy} policy, {problem}.")
            out.append(Finding.make(self.name, guidance, evidence, score, moves))
        return out

    @staticmethod
    def _judge(operand: str, policy: str, dtype: str | None, native: str | None, compensated: bool = False
               ) -> tuple[float, str, list[Move]] | None:
        """(score, what is wrong and what to do, moves), or ``None`` when the operand type is right."""
        if operand == "F64" or operand == native:
            return None
        if native is not None and operand == "TF32":  # lossless for fp16 / bf16, but half the rate
            return (UPCAST, f"which upcasts the {dtype} inputs and runs at about half the {dtype} tensor-core "
                    f"rate ({TF32_TFLOPS} against {BF16_TFLOPS} TFLOP/s), so feed them as {dtype}",
                    [StructuralMove("match_input_precision")])
        if policy == "fp32" and operand in ("TF32", "BF16") and compensated:
            return None  # a 3xTF32 / bf16x3 split: these operands carry fp32 accuracy between them
        if policy == "fp32":
            return (VIOLATION, "which rounds the inputs to fewer mantissa bits than fp32 keeps (a precision "
                    "violation unless the kernel compensates), so use 3xTF32 emulation or an fp32 product",
                    [StructuralMove("use_tf32x3"), StructuralMove("use_ieee_fp32")])
        if operand not in _RELAXED_OK:
            return (VIOLATION, "a narrower type than even the relaxed policy allows (tf32, bf16, fp16), so "
                    "multiply in the inputs' own type or in bf16", [StructuralMove("match_input_precision")])
        if native is None:
            return None
        if operand == "BF16":
            return (MANTISSA_LOSS, "which drops the fp16 inputs from 10 to 7 mantissa bits, so feed them as fp16",
                    [StructuralMove("match_input_precision")])
        return (OVERFLOW_RISK, "which overflows bf16 inputs beyond 65504 and flushes their small values, so "
                "feed them as bf16", [StructuralMove("match_input_precision")])


TOOL = TensorCorePrecisionTool()
