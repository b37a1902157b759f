"""The flash-attention template's derived sizes and the rule that says when it pays: both the
capture (which refuses an attention the template would make slower) and the generator read them."""

from __future__ import annotations

from loopwise.kernels.expert.pattern import Pattern

ATTENTION_SHARED_BYTES = 160 * 1024  # what an attention program's tiles may take of Hopper's 227 KiB
_ATTENTION_STAGES = 2


def attention_values(pattern: Pattern, precision: str) -> dict:
    """The attention template's derived sizes: the head dimension's and the value dimension's
    slices (powers of two of at least 16, at most 64 fp32 / 128 half elements), the pipeline depth,
    and the sentence on how the scores are computed."""
    p = dict(pattern.params)
    half = p["dtype"] != "float32"
    cap = 128 if half else 64

    def slice_of(n: int) -> int:
        return max(16, min(1 << (n - 1).bit_length(), cap))

    note = (f"{p['dtype']} products summed in fp32" if half else
            "tf32x3, fp32-accurate" if precision == "fp32" else "TF32, the relaxed policy: not fp32-accurate")
    return {"block_d": slice_of(p["d"]), "block_dv": slice_of(p["dv"]), "stages": _ATTENTION_STAGES,
            "precision_note": note}


# Machine balance of the attention template's products, in flops per byte of DRAM traffic: tf32x3
# (three products each) a third of TF32's (420.8 TFLOP/s over 4256 GB/s, about 99); bf16 849.5
# TFLOP/s over 4256 GB/s, about 200.
_ATTENTION_BALANCE = {"float32": 99.0 / 3, "bfloat16": 200.0, "float16": 200.0}


_SCORE_PASSES = 4  # the unfused plan's score matrix: written, read and written by softmax, read


def attention_recompute_reason(pattern: Pattern) -> str | None:
    """Why the flash template does not pay for ``pattern``, or None when it does. A program holds
    one value slice (:func:`attention_values`), so with several slices each recomputes the scores:
    ``(slices - 1) * sq * sk * d * 2`` extra flops, against the ``4 * sq * sk`` elements of score
    traffic the fusion saves. At the template's machine balance the recompute costs more time than
    the traffic once ``(slices - 1) * d * 2 > 4 * element bytes * balance`` (fp32: 128-wide heads
    fuse, 256-wide ones do not; fp16 / bf16: up to 256)."""
    p = dict(pattern.params)
    sizes = attention_values(pattern, "fp32")
    slices = -(-p["dv"] // sizes["block_dv"])
    width = 4 if p["dtype"] == "float32" else 2
    extra_flops = (slices - 1) * p["d"] * 2  # per score element
    saved_bytes = _SCORE_PASSES * width      # per score element
    if extra_flops <= saved_bytes * _ATTENTION_BALANCE[p["dtype"]]:
        return None
    return (f"attention with head dimension {p['d']} and value dimension {p['dv']} ({p['dtype']}): a flash "
            f"kernel holds {sizes['block_dv']} value columns per program, so {slices} programs would each "
            f"recompute the {p['sq']}x{p['sk']} scores, {slices * p['d'] + p['dv']} multiply-adds per score "
            f"against {p['d'] + p['dv']} for PyTorch's matmul, softmax, matmul; the score matrix it would "
            "keep out of memory is small next to the operands")

