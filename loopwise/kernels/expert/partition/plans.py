"""Reading a partitioned (``graph``) pattern's plans: one per template kind."""

from __future__ import annotations

import re

from loopwise.kernels.expert.partition.records import LAUNCHERS

# What TF32 speeds up among the parts left in PyTorch: convolutions (cuDNN) and matrix products (cuBLAS).
_TF32_OPS = re.compile(r"(?i)conv|linear|matmul|^mm$|bmm|addmm|einsum|lstm|gru|rnn|attention")


def plan(pattern, kind: str) -> dict:
    """The plan of ``pattern`` (a ``graph`` pattern) for template ``kind``; KeyError if none."""
    return dict(dict(dict(pattern.params)["plans"])[kind])


def launches(chosen: dict) -> int:
    """About how many operations one forward of the plan ``chosen`` launches: one per fused pass,
    GEMM, softmax, row operation (two when its launcher splits a long reduced dimension, which it
    decides from the input's shape) and LayerNorm, two per layer of a recurrent module (its input
    projections, its time steps), three per other norm (statistics, finalize, normalize) and one
    per operation left in PyTorch (a view or a size among them: each costs the host a dispatch all
    the same)."""
    norms = sum(2 * n.recurrent.layers if n.recurrent else 1 if n.kind in LAUNCHERS else 3 for n in chosen["norms"])
    return len(chosen["groups"]) + len(chosen["gemms"]) + norms + len(chosen["pytorch"])


# Operations that pick an index or an order among their input's values (their ATen names too).
PICKS = frozenset({"argmin", "argmax", "topk", "sort", "argsort", "kthvalue", "mode", "median", "nanmedian"})


def picks_after_half_gemm(chosen: dict) -> bool:
    """Whether the plan ``chosen`` runs a half-precision product as a Triton GEMM and the forward
    picks an index or an order among values (an argmin, a top-k). A Triton GEMM sums in another
    order than cuBLAS, so some of its half sums round to a neighbouring value, and at a near-tie the
    pick differs from the reference's: a whole index or row is wrong, not a rounding. In fp32 the
    sums differ in the last bits only, and such ties are far rarer."""
    half = any(getattr(g, "dtype", "float32") in ("float16", "bfloat16") for g in chosen["gemms"])
    ops = set(chosen["pytorch"]) | {op for part in ("groups", "norms") for g in chosen[part] for op in g.ops}
    return half and bool(ops & PICKS)


def kinds(pattern) -> list[str]:
    """The template kinds a ``graph`` pattern has plans for, the elementwise-only one first."""
    return [kind for kind, _ in dict(pattern.params)["plans"]]


def tf32_parts(plan: dict) -> tuple[str, ...]:
    """The operations of ``plan`` left in PyTorch that TF32 would run faster (convolutions and
    matrix products), in order; under the ``relaxed`` policy the forward runs them with TF32 allowed,
    as eager + TF32 does."""
    return tuple(op for op in plan["pytorch"] if _TF32_OPS.search(op))

