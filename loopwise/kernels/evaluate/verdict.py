"""How a verdict is decided from its reasons, and which precision policy the static scan applies.

A reason that rejects a candidate names a code; the codes of exploits and of candidates that do
not build sort the verdict into its status (an exploit first), and any other rejection is a wrong
output.
"""

from __future__ import annotations

from loopwise.kernels.evaluate.result import Reason, Status

COMPILE_CODES = {"syntax_error", "missing_modelnew", "compile_error"}
EXPLOIT_CODES = {
    "timer_patch", "thread_injection", "lazy_eval", "reference_access", "reference_call", "fallback",
    "process_spawn", "precision_downgrade", "no_custom_kernel", "pytorch_only", "unsynchronized_work",
    "input_mutation", "pointer_cache", "input_independent_output", "faster_than_floor",
    "side_stream", "library_patch", "timing_mismatch", "timed_output_wrong", "decoy_kernel",
    "environment_read",
}


def status_for(reasons: list[Reason]) -> Status:
    rejects = [r for r in reasons if r.severity == "reject"]
    if not rejects:
        return Status.CORRECT
    codes = {r.code for r in rejects}
    if codes & EXPLOIT_CODES:
        return Status.EXPLOIT
    if codes & COMPILE_CODES:
        return Status.COMPILE_ERROR
    return Status.WRONG_OUTPUT


HALF_DTYPES = ("bfloat16", "float16")


def static_policy(problem, policy: str) -> str:
    """The precision policy the static scan applies to ``problem``'s candidates: under ``fp32`` a
    problem whose inputs or model tensors (a bf16 table its int64 inputs index) are already bf16 /
    fp16 computes in that precision itself, so half-precision types and tensor-core paths in a
    candidate are its own precision, not a downgrade (they are reported as info, and the float64
    comparisons still judge the numbers)."""
    signature = getattr(problem, "signature", None)
    dtypes = (*(getattr(signature, "input_dtypes", ()) or ()), *(getattr(signature, "model_dtypes", ()) or ()))
    if policy == "fp32" and any(d in HALF_DTYPES for d in dtypes if d):
        return "relaxed"
    return policy

