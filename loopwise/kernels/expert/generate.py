"""Emits a standalone ``ModelNew`` source from a captured pattern and a set of moves."""

from __future__ import annotations

import functools
import keyword
from importlib import resources

from loopwise.kernels.expert import matmul_variants
from loopwise.kernels.expert.attention_plan import ATTENTION_SHARED_BYTES, attention_values
from loopwise.kernels.expert.capture import capture
from loopwise.kernels.expert.elementwise import UNARY, with_cuda_math
from loopwise.kernels.expert.partition import kinds, launches, picks_after_half_gemm, plan, tf32_parts
from loopwise.kernels.expert.partition.records import RecurrentOp
from loopwise.kernels.expert.pattern import Pattern

DEFAULT_MOVES = {"elementwise": {"block": 1024, "warps": 4, "channels_last": 0}, "graph": {"block": 1024, "warps": 4, "cudagraph": 0},
                 "graph_norm": {"block": 1024, "warps": 4, "cudagraph": 0, "scan64": 0},
                 "graph_linear": {"block": 1024, "warps": 4, "tile": 128, "chunk": 32, "gemm_warps": 8, "cudagraph": 0, "cublas": 0},
                 "graph_conv": {"block": 1024, "warps": 4, "tile": 128, "chunk": 32, "gemm_warps": 8, "cudagraph": 0, "nhwc": 0},
                 "row_softmax": {"block": 2048, "warps": 8}, "cross_entropy": {"block": 4096, "warps": 8},
                 "layernorm": {"block": 1024, "warps": 4, "chunk": 16384},
                 "layernorm_welford": {"block": 1024, "warps": 4, "chunk": 16384},
                 "attention": {"block": 64, "warps": 4, "chunk": 64},
                 "matmul": {"block": 128, "warps": 8, "chunk": 32, "split": 1, "kmajor": 0},
                 "bmm": {"block": 128, "warps": 8, "chunk": 32}, "topk": {"block": 1024, "warps": 4}, "linear": {"block": 128, "warps": 8, "chunk": 32},
                 "linear_cublas": {"block": 1024, "warps": 4},
                 "reduce": {"block": 64, "warps": 4, "chunk": 32}, "scan": {"block": 1024, "warps": 4, "scan64": 0},
                 "norm": {"block": 64, "warps": 4, "chunk": 32}, "pool": {"block": 256, "warps": 4},
                 "recurrent": {"block": 128, "warps": 8, "chunk": 32},
                 # one launch a time step: a program per 16 hidden units (the most programs a step), h read
                 # 32 columns at a time on 2 warps (the widest slice whose sm_90a build kept 16 units' four
                 # gates in registers without spilling)
                 "recurrent_steps": {"block": 16, "warps": 2, "chunk": 32, "cudagraph": 0},
                 "conv2d": {"block": 128, "warps": 8, "chunk": 32, "nhwc": 0},
                 "conv3d": {"block": 128, "warps": 4, "chunk": 16},
                 "conv_transpose": {"block": 128, "warps": 4, "chunk": 16},
                 "separable_conv": {"block": 128, "warps": 8, "chunk": 16}, **matmul_variants.DEFAULT_MOVES}
DEFAULT_MOVES["graph_full"] = {**DEFAULT_MOVES["graph_linear"], "scan64": DEFAULT_MOVES["graph_norm"]["scan64"]}
TEMPLATES = {"elementwise": "elementwise.py.j2", "graph": "graph.py.j2", "graph_norm": "graph.py.j2", "graph_linear": "graph.py.j2", "graph_full": "graph.py.j2", "graph_conv": "graph.py.j2", "row_softmax": "row_softmax.py.j2", "cross_entropy": "cross_entropy.py.j2",
             "layernorm": "layernorm.py.j2",
             "layernorm_welford": "layernorm_welford.py.j2", "attention": "attention.py.j2",
             "matmul": "matmul.py.j2", "bmm": "bmm.py.j2", "topk": "topk.py.j2", "linear": "linear.py.j2", "linear_cublas": "linear_cublas.py.j2", "reduce": "reduce_dim.py.j2",
             "scan": "scan_rows.py.j2", "norm": "norm_dim.py.j2", "recurrent": "recurrent.py.j2",
             "recurrent_steps": "recurrent.py.j2",
             "pool": "pool.py.j2", "conv2d": "conv2d.py.j2", "conv3d": "conv3d.py.j2",
             "conv_transpose": "conv_transpose.py.j2", "separable_conv": "separable_conv.py.j2",
             "matmul_cutlass": "matmul_cutlass.py.j2", "matmul_3xtf32": "matmul_3xtf32.py.j2",
             "matmul_cutlass_tf32": "matmul_cutlass.py.j2", "matmul_1xtf32": "matmul_3xtf32.py.j2",
             "bmm_cutlass": "bmm_cutlass.py.j2", "bmm_cutlass_tf32": "bmm_cutlass.py.j2"}


def variants(pattern: Pattern, precision: str = "fp32") -> list[str]:
    """The template kinds that can write ``pattern`` under ``precision``, its own (Triton) first:
    a matrix product adds its CUTLASS variant where the dtype, the policy and the operands'
    alignment allow one (see :mod:`matmul_variants`). Where the Triton template splits K (few
    output tiles, a long K) only the mma.sync variants are added (3xTF32 under fp32, one TF32
    product under relaxed), which split K too: the WGMMA variants have no split-K and would leave
    most SMs idle (the unsplit CUTLASS products were far slower than the split Triton template
    where it splits; see docs/log/expert-notes.md), and each costs a minute of nvcc.
    Where K is not split, relaxed gets WGMMA's TF32 alone: Hopper's warp-group MMA, not the
    Ampere-era mma.sync, is its fast path. A batch of products adds the same WGMMA kernel in
    CUTLASS 3's batched mode where its dtype, the policy and the alignment of every operand and
    batch entry allow (bf16 / fp16; fp32 in TF32 under relaxed only). A partitioned forward's
    plans come fewest launches first (:func:`partition.launches`), ties in the partition's order:
    a search of few candidates judges only the first; a plan whose half-precision Triton GEMM
    feeds an argmin, a top-k or a sort is left out (:func:`partition.plans.picks_after_half_gemm`).
    Empty when no template covers it."""
    if pattern.kind not in TEMPLATES:
        return []
    if pattern.kind == "matmul":
        split_k = default_moves(pattern, "matmul", precision)["split"] > 1
        return ["matmul", *matmul_variants.library_variants(pattern, precision, split_k)]
    if pattern.kind == "bmm":
        return ["bmm", *matmul_variants.library_variants(pattern, precision)]
    if pattern.kind == "graph":  # the plans, fewest launches first (a short search judges the first only)
        safe = [kind for kind in kinds(pattern) if not picks_after_half_gemm(plan(pattern, kind))]
        return sorted(safe, key=lambda kind: launches(plan(pattern, kind)))
    if pattern.kind == "linear":  # under relaxed also cuBLAS's TF32 GEMM with the epilogue as one Triton pass
        return ["linear", "linear_cublas"] if precision == "relaxed" and pattern.body else ["linear"]
    if pattern.kind == "layernorm":  # three reads of the input, or two with Welford's statistics
        return ["layernorm", "layernorm_welford"]
    if pattern.kind == "recurrent":  # the time steps walked in one launch, or one launch per step
        return ["recurrent", "recurrent_steps"]
    return [pattern.kind]


# Split-K aims at about two programs per SM of a 132-SM Hopper, and keeps each K range at least
# this many elements long (shorter ones spend more on the partials than they gain).
_SPLIT_PROGRAMS, _SPLIT_MIN_K, _SPLIT_MAX = 264, 2048, 64


def _default_split(p: dict, tile_m: int, tile_n: int, most: int) -> int:
    """Split-K's K ranges for a product of ``p``'s shape in tile_m x tile_n output tiles: the
    largest power of two up to ``most`` that keeps the programs within _SPLIT_PROGRAMS and each K
    range at least _SPLIT_MIN_K long (1: no split)."""
    tiles = -(-p["m"] // tile_m) * -(-p["n"] // tile_n)
    split = 1
    while split * 2 <= most and tiles * split * 2 <= _SPLIT_PROGRAMS and p["k"] // (split * 2) >= _SPLIT_MIN_K:
        split *= 2
    return split


# K-major copies of an fp32 product's M- or N-major operands are made by default while they cost at
# most this share of the product's time without them. That time is taken at the rate Triton's
# products reached on the H200 without the copies, per policy and per operand copied (the slower
# rate of the operands copied counts); the copies at the rate PyTorch's transposing copy reached,
# about a tenth of the device's bandwidth. At a share of 0.5 the copies paid for themselves on the
# products measured. The rates and where they come from: docs/log/expert-notes.md.
_KMAJOR_SHARE, _COPY_BYTES_PER_S = 0.5, 400e9
_MN_MAJOR_FLOPS = {("fp32", "a"): 36e12, ("fp32", "b"): 36e12, ("relaxed", "a"): 47e12, ("relaxed", "b"): 82e12}


def kmajor_share(pattern: Pattern, precision: str = "fp32") -> float:
    """The time of copying an fp32 product's M- or N-major operands K-major (read and write),
    as a share of the product's time without the copies under ``precision``: 0 when both are
    K-major already."""
    p = dict(pattern.params)
    precision = precision if precision == "relaxed" else "fp32"
    copied = {"a": p["m"] * p["k"] if p["trans_a"] else 0, "b": 0 if p["trans_b"] else p["k"] * p["n"]}
    if not any(copied.values()):
        return 0.0
    flops = min(_MN_MAJOR_FLOPS[precision, operand] for operand, elements in copied.items() if elements)
    return 2 * 4 * sum(copied.values()) * flops / _COPY_BYTES_PER_S / (2 * p["m"] * p["n"] * p["k"])


def default_moves(pattern: Pattern, kind: str | None = None, precision: str = "fp32") -> dict:
    """``kind``'s default moves for ``pattern``: the template's defaults, and for a matrix product
    with few output tiles and a long K, split-K (the largest power of two that keeps the programs
    within about two per SM and each K range long; Triton's and CUTLASS 3xTF32's alike); for an fp32 one with an M- or N-major operand,
    K-major copies where they are cheap next to the product under ``precision`` (Hopper's TF32
    tensor-core products read both operands K-major from shared memory: Triton stages an MN-major
    fp32 tile 4 bytes at a time instead of 16); for a cross-entropy, a block that holds a whole
    row where one of at most 8192 classes does.

    The convolutions' defaults (128 output positions x 16 channels a step on 4 warps for conv3d
    and the transposed ones) are the candidates that were fastest, or close to it, on the
    problems measured.

    Under relaxed a partitioned forward's Linears run in cuBLAS by default (``cublas``), their
    epilogues as Triton passes, because the Triton TF32 GEMMs were slower than cuBLAS's on every
    GEMM-bound problem measured; the Triton GEMMs stay a move away.

    Scans accumulate in float64 by default where :func:`wide_scans_pay` says so (``scan64``).

    A partitioned forward of :data:`LAUNCH_HEAVY` or more launches replays from a CUDA graph by
    default (``cudagraph``), and so does a recurrent module launched once per time step
    (``recurrent_steps``, :func:`recurrent_launches`): with hundreds of launches the host sets the
    pace and the graph made the plan much faster, while on forwards of a few launches over large
    tensors it cost speed (the inputs and outputs are copied in and out); the other setting stays
    a move away.

    The measurements behind these defaults: docs/log/expert-notes.md."""
    kind = kind or pattern.kind
    moves = dict(DEFAULT_MOVES[kind])
    if kind in matmul_variants.MMA_SYNC_KINDS:  # CUTLASS's parallel split-K, by the same rule as the Triton template's
        p = dict(pattern.params)
        tile_m, tile_n, _ = matmul_variants.dims(moves["tile"])
        moves["split"] = _default_split(p, tile_m, tile_n, max(matmul_variants.TF32X3_SPLITS))
    if kind == "matmul":
        p = dict(pattern.params)
        moves["split"] = _default_split(p, moves["block"], moves["block"], _SPLIT_MAX)
        share = kmajor_share(pattern, precision)
        moves["kmajor"] = int(p["dtype"] == "float32" and 0 < share <= _KMAJOR_SHARE)
    if "cudagraph" in moves and pattern.kind == "graph" and _launch_heavy(pattern, kind):
        moves["cudagraph"] = 1  # hundreds of launches: the host, not the GPU, sets the pace (see above)
    if kind == "recurrent_steps" and recurrent_launches(pattern, kind) >= LAUNCH_HEAVY:
        moves["cudagraph"] = 1  # a launch per time step and layer: the same rule as a partitioned forward's
    if kind in ("graph_linear", "graph_full") and precision == "relaxed" and fits(pattern, {**moves, "template": kind, "cublas": 1}):
        moves["cublas"] = 1  # cuBLAS's TF32 GEMMs: the Triton ones were slower (see the docstring)
    if "scan64" in moves:
        moves["scan64"] = int(wide_scans_pay(pattern, kind, precision))
    if kind == "topk":  # a whole line in one chunk up to 4096 entries (a chunk costs k selections)
        moves["block"] = min(max(1 << (dict(pattern.params)["size"] - 1).bit_length(), 256), 4096)
    if kind == "cross_entropy":  # a whole row in one block (read once) up to 8192 classes
        moves["block"] = min(max(1 << (dict(pattern.params)["classes"] - 1).bit_length(), 512), 8192)
    return moves


# The longest line a rounding scan accumulates in fp32 by default (see wide_scans_pay).
FP32_SCAN_LENGTH = 8


def rounding_scan_lengths(pattern: Pattern, kind: str) -> list[int]:
    """The entries per line of each scan whose steps round (cumsum, cumprod, logcumsumexp) that
    ``kind`` writes for ``pattern`` as a kernel of ours: the scan template's one, a partitioned
    forward's row parts; empty where there is none."""
    if kind == "scan" and pattern.kind == "scan":
        return [dict(pattern.params)["length"]]
    if pattern.kind != "graph" or kind not in kinds(pattern):
        return []
    return [n.row.length for n in plan(pattern, kind)["norms"] if n.kind == "row" and n.row.rounds]


def wide_scans_pay(pattern: Pattern, kind: str, precision: str = "fp32") -> bool:
    """The ``scan64`` move's default: whether ``kind``'s scans that round (cumsum, cumprod,
    logcumsumexp) accumulate in float64 (their carries and partial totals too; each output is
    rounded to fp32 once, as PyTorch's CPU scans do), rather than in fp32.

    The rule: under the fp32 policy, where some such scan's line is longer than
    :data:`FP32_SCAN_LENGTH` entries. An fp32 running sum or product over n entries can be off
    by about n - 1 roundings, and each later step adds the earlier ones' errors; the judge allows
    a float64-bounded fp32 output ``fp32_error_factor`` (8) times the error of a reference that
    rounds once, so past that many entries the fp32 scan alone can spend the allowance (more
    where the forward magnifies it, as exp of a cumsum does). Shorter lines, and the relaxed
    policy (allclose at its tolerance), keep fp32's cheaper registers and shuffles. The other
    setting stays a move away; :func:`fits` offers ``scan64`` only where such a scan exists."""
    return precision != "relaxed" and any(n > FP32_SCAN_LENGTH for n in rounding_scan_lengths(pattern, kind))


# A partitioned forward's recurrent parts: the recurrent template's default tiles (its own
# moves tune them), and the batch rows a program owns.
RECURRENT_TILES = {**DEFAULT_MOVES["recurrent"], "rows": RecurrentOp.ROWS}


def recurrent_launches(pattern: Pattern, kind: str) -> int:
    """The kernel launches of one forward of the recurrent template ``kind`` on ``pattern``: per
    layer the projections' GEMM, then the time steps' one launch (``recurrent``) or one launch a
    time step (``recurrent_steps``)."""
    p = dict(pattern.params)
    return p["op"].layers * (1 + (p["steps"] if kind == "recurrent_steps" else 1))


LAUNCH_HEAVY = 100  # launches per forward from which a partitioned plan replays a CUDA graph by default


def _launch_heavy(pattern: Pattern, kind: str) -> bool:
    return kind in kinds(pattern) and launches(plan(pattern, kind)) >= LAUNCH_HEAVY


def conv_transpose_values(pattern: Pattern) -> dict:
    """The transposed convolution's sizes as three dimensions (a 2-D one has a depth of one), and
    its stride phases' window positions. Output index o takes window position k from input index
    (o + padding - k * dilation) / stride where that is whole: for the phase p = o mod stride, the
    positions k with (p + padding - k * dilation) divisible by the stride, which step by stride /
    gcd(stride, dilation) from the first. ``taps`` lists, per dimension, each phase's first
    position and then each phase's count (0: that phase's outputs are the bias alone)."""
    import math

    p = dict(pattern.params)
    lead = 3 - len(p["kernel"])
    kernel, stride = (1,) * lead + p["kernel"], (1,) * lead + p["stride"]
    padding, dilation = (0,) * lead + p["padding"], (1,) * lead + p["dilation"]
    output_padding = (0,) * lead + p["output_padding"]
    taps: list[int] = []
    for k, s, pad, d in zip(kernel, stride, padding, dilation):
        whole = [[j for j in range(k) if (phase + pad - j * d) % s == 0] for phase in range(s)]
        taps += [w[0] if w else 0 for w in whole] + [len(w) for w in whole]
    return {"dims": len(p["kernel"]), "kernel3": kernel, "stride3": stride, "padding3": padding,
            "dilation3": dilation, "output_padding3": output_padding, "taps": taps,
            "steps": tuple(s // math.gcd(s, d) for s, d in zip(stride, dilation)),
            "phases": stride[0] * stride[1] * stride[2]}


def nhwc_convolutions(pattern: Pattern, kind: str) -> bool:
    """Whether ``kind`` writes ``pattern`` with an implicit-GEMM convolution that can read NHWC (the
    ``nhwc`` move): a convolution of at least NHWC_CHANNELS input channels."""
    if kind == "conv2d":
        return dict(pattern.params)["in_channels"] >= NHWC_CHANNELS
    if kind == "graph_conv":
        return any(g.conv and g.conv[5] >= NHWC_CHANNELS for g in plan(pattern, kind)["gemms"])
    return False


_SPLIT_PARTS_BYTES = 1 << 30  # the most split-K's fp32 partial tiles may take


HOPPER_SHARED_BYTES = 227 * 1024  # shared memory one block may take on sm_90 (opted in); a launch asking more fails


# The implicit-GEMM convolution (conv2d, graph_conv; templates/_conv.j2) gathers its NCHW input over
# (channel, kh, kw) by default. With the ``nhwc`` move it reads the input NHWC, a window position's
# channels in chunks (K-major tiles, 16-byte copies), where a convolution has at least this many input
# channels (one MMA step of K; with fewer most of each chunk would be empty). The NHWC form was the
# slower at every tile measured (docs/log/expert-notes.md), so it is a move the search may try,
# never the default.
NHWC_CHANNELS = 16


_CHANNELS_LAST = {"conv2d": "torch.channels_last", "convtranspose2d": "torch.channels_last",
                  "conv3d": "torch.channels_last_3d", "convtranspose3d": "torch.channels_last_3d"}


def _channels_last_layout(pattern: Pattern) -> str | None:
    """The channels-last memory format for the convolution an elementwise pattern starts with, or
    None (no convolution, or a 1-D one)."""
    if pattern.kind != "elementwise" or not pattern.prologue or not pattern.ops:
        return None
    return _CHANNELS_LAST.get(pattern.ops[0])


def separable_stages(pattern: Pattern, block: int, chunk: int) -> int:
    """Pipeline stages of the separable convolution's loop over channels: the most, up to 3, whose
    buffers fit in shared memory. Triton prefetches the input tile of every tap (block x chunk fp32)
    for each stage after the first, beside the product's operands (the shared memory Triton took
    per stage count: docs/log/expert-notes.md). Bounded here by ((stages - 1) x taps + stages + 2)
    tiles."""
    p = dict(pattern.params)
    taps, tile = p["kh"] * p["kw"], block * chunk * 4
    for stages in (3, 2):
        if ((stages - 1) * taps + stages + 2) * tile <= HOPPER_SHARED_BYTES:
            return stages
    return 1


def fits(pattern: Pattern, moves: dict) -> bool:
    """Whether ``moves`` suit ``pattern``'s shape: split-K only where every range has at least one K
    step and its fp32 partials (split x M x N) stay within 1 GiB (3xTF32's also only where its
    programs stay within two waves of about two per SM); K-major copies only of an fp32
    product's M- or N-major operands; NHWC reads only where a convolution has the channels for
    them; float64 scans only where a scan rounds; attention tiles (queries, and keys and values per pipeline stage) within shared memory, and
    a recurrent kernel's tiles too (:func:`recurrent_fits`)."""
    if moves.get("template", pattern.kind) in ("recurrent", "recurrent_steps"):
        kind = moves.get("template", pattern.kind)
        tiles = {**DEFAULT_MOVES[kind], **moves}
        return recurrent_fits(dict(pattern.params)["op"], tiles["block"], tiles["chunk"], kind == "recurrent_steps")
    if moves.get("template", pattern.kind) == "attention":
        sizes = attention_values(pattern, "fp32")
        width = 4 if dict(pattern.params)["dtype"] == "float32" else 2
        block, chunk = moves.get("block", 64), moves.get("chunk", 64)
        tiles = block * sizes["block_d"] + sizes["stages"] * chunk * (sizes["block_d"] + sizes["block_dv"])
        return tiles * width <= ATTENTION_SHARED_BYTES
    if moves.get("nhwc") and not nhwc_convolutions(pattern, moves.get("template", pattern.kind)):
        return False  # no convolution with enough input channels to read NHWC
    if moves.get("cublas") and not _cublas_leaves_a_kernel(pattern, moves.get("template", pattern.kind)):
        return False  # every Linear in cuBLAS and nothing else in Triton: no kernel of ours would run
    if moves.get("cublas") and any(moves.get(k, v) != v for k, v in _TRITON_GEMM_DEFAULTS.items()) \
            and not _activation_products(pattern, moves.get("template", pattern.kind)):
        return False  # the Triton GEMM's knobs do nothing with cuBLAS's GEMMs: one point, not a dozen alike
    if moves.get("scan64") and not rounding_scan_lengths(pattern, moves.get("template", pattern.kind)):
        return False  # no scan that rounds: float64 accumulation changes nothing
    if moves.get("channels_last") and not _channels_last_layout(pattern):
        return False  # a layout for the convolution before the tail: without one, nothing to lay out
    if moves.get("kmajor") and (moves.get("template", pattern.kind) != "matmul"
                                or dict(pattern.params)["dtype"] != "float32" or not kmajor_share(pattern)):
        return False  # copies only for fp32 products (TF32 reads K-major), and only where one is not K-major
    split, kind = moves.get("split", 1), moves.get("template", pattern.kind)
    if kind not in ("matmul", *matmul_variants.MMA_SYNC_KINDS) or split == 1:
        return True
    p = dict(pattern.params)
    if kind in matmul_variants.MMA_SYNC_KINDS:  # and only where the tiles leave SMs idle: at most two waves of programs
        tile_m, tile_n, step = matmul_variants.dims(moves.get("tile", DEFAULT_MOVES[kind]["tile"]))
        if -(-p["m"] // tile_m) * -(-p["n"] // tile_n) * split > 2 * _SPLIT_PROGRAMS:
            return False
    else:
        step = moves.get("chunk", 1)
    return split * p["m"] * p["n"] * 4 <= _SPLIT_PARTS_BYTES and p["k"] >= split * step


# Shared memory a recurrent step kernel takes beyond its operand tiles (Triton's conversion scratch).
_RECURRENT_SCRATCH_BYTES = 16 * 1024


def recurrent_fits(op: RecurrentOp, block: int, chunk: int, per_step: bool = False) -> bool:
    """Whether the recurrent step kernel's tiles fit in shared memory: per step of its loop over W_hh's
    columns, h's (ROWS x chunk) and each gate's (chunk x block) fp32 tile, in two pipeline stages
    (what Triton allocated for it), both knobs narrowed to the hidden size as the launcher narrows
    them. Beside them the kernel that walks the steps (``per_step`` false) takes a fixed scratch
    (a block of 128 and a chunk of 64 over four gates do not fit); the kernel of one step
    (``recurrent_steps``) two more of h's tiles instead, which grow with the chunk (four gates of 64
    hidden units by 128 columns do not fit, three gates' do)."""
    width = max(16, 1 << (op.hidden - 1).bit_length())
    block, chunk = min(block, width), min(chunk, width)
    h_tile = 4 * op.ROWS * chunk
    stage = h_tile + 4 * op.gates * chunk * block
    return 2 * stage + (2 * h_tile if per_step else _RECURRENT_SCRATCH_BYTES) <= HOPPER_SHARED_BYTES


_TRITON_GEMM_DEFAULTS = {k: DEFAULT_MOVES["graph_linear"][k] for k in ("tile", "chunk", "gemm_warps")}


def _cublas_leaves_a_kernel(pattern: Pattern, kind: str) -> bool:
    """Whether ``kind``'s plan has a Linear for cuBLAS and keeps a Triton kernel with its Linears
    there (the ``cublas`` move): a Linear with elementwise work after it, or another part (a
    product of two activations stays a Triton GEMM)."""
    if pattern.kind != "graph" or kind not in ("graph_linear", "graph_full"):
        return False
    chosen = plan(pattern, kind)
    if not any(g.weight for g in chosen["gemms"]):
        return False
    return bool(chosen["groups"] or chosen["norms"] or any(len(g.ops) > 1 or not g.weight for g in chosen["gemms"]))


def _activation_products(pattern: Pattern, kind: str) -> bool:
    """Whether ``kind``'s plan has a Triton GEMM of two activations (a split attention's), whose
    tiles the GEMM knobs set whatever the ``cublas`` move does."""
    return pattern.kind == "graph" and kind in kinds(pattern) and any(not g.weight for g in plan(pattern, kind)["gemms"])


@functools.cache
def _templates():
    """The templates' Jinja environment: each renders on its own, and shares macros with the others
    through ``{% from "_name.j2" import ... %}`` (the implicit-GEMM convolution's main loop)."""
    import jinja2

    folder = resources.files("loopwise.kernels.expert") / "templates"
    loader = jinja2.FunctionLoader(lambda name: (folder / name).read_text())
    return jinja2.Environment(loader=loader, keep_trailing_newline=True)


def render(pattern: Pattern, moves: dict | None = None, precision: str = "fp32") -> str:
    """The source for ``pattern`` with ``moves`` (block size, warps) over the defaults. Matrix
    products run on the tensor cores through tf32x3 under the ``fp32`` policy (fp32-accurate) and
    as plain TF32 under ``relaxed``; bf16 / fp16 ones in their own type. ``moves["template"]``
    picks another variant of the pattern's template (``matmul_cutlass``, ``matmul_3xtf32``), whose
    knobs then replace block, warps and chunk.

    Raises:
        ValueError: the variant cannot compute this pattern, or CUTLASS would not build its knobs.
    """
    moves = dict(moves or {})
    # a partitioned forward's own template is its first plan (the elementwise one, where it has one)
    kind = moves.pop("template", kinds(pattern)[0] if pattern.kind == "graph" else pattern.kind)
    params = {**default_moves(pattern, kind, precision), **moves}
    if kind in ("layernorm", "layernorm_welford"):
        # A chunk is a whole number of blocks.
        params["chunk"] = max(params["block"], params["chunk"] // params["block"] * params["block"])
    note, extra = _note_and_values(kind, pattern, params, precision)
    if pattern.kind == "graph":  # a plan without GEMM knobs tiles its products of two activations by default
        params = {**_TRITON_GEMM_DEFAULTS, **params}
    if kind == "attention":
        extra = {**extra, **attention_values(pattern, precision)}
    if kind == "topk":  # the kept list's length: a power of two
        extra = {**extra, "k_pad": max(2, 1 << (dict(pattern.params)["k"] - 1).bit_length())}
    if kind in ("conv3d", "conv_transpose", "separable_conv"):  # output channels per tile: no wider than the output's, in powers of two
        per_group = dict(pattern.params)["out_channels"] // dict(pattern.params).get("groups", 1)  # a tile is one group's
        extra = {**extra, "block_n": min(params["block"], max(16, 1 << (per_group - 1).bit_length()))}
    if kind == "conv_transpose":
        extra = {**extra, **conv_transpose_values(pattern)}
    if kind == "separable_conv":
        extra = {**extra, "stages": separable_stages(pattern, params["block"], params["chunk"])}
    if pattern.kind == "graph":
        chosen = plan(pattern, kind)
        # the parts in Triton: with the cublas move a Linear's is the work after it, if any
        gemms = [g for g in chosen["gemms"] if len(g.ops) > 1 or not g.weight] if params.get("cublas") else chosen["gemms"]
        triton = (*gemms, *chosen["norms"], *chosen["groups"])
        extra = {**extra, **chosen, "attention_tiles": DEFAULT_MOVES["attention"], "recurrent_tiles": RECURRENT_TILES,
                 "tf32_parts": tf32_parts(chosen) if precision == "relaxed" else (),
                 "plan_ops": ", ".join("+".join(g.ops[1:] if params.get("cublas") and getattr(g, "weight", True) else g.ops)
                                       for g in triton),
                 "parts": len(triton)}
        if params.get("cublas"):  # what stays in PyTorch: the Linears too
            extra["pytorch"] = (*chosen["pytorch"], *(f"{g.module} (cuBLAS)" for g in chosen["gemms"] if g.weight))
    template = _templates().get_template(TEMPLATES[kind])
    source = template.render(count=pattern.inputs, expr=pattern.expr, body=pattern.body, ops=", ".join(pattern.ops),
                           op_list=pattern.ops,
                           note=note, operands=pattern.operands, init=pattern.init, constants=pattern.constants,
                           prologue=pattern.prologue, scalars=pattern.scalars,
                           dot_precision="tf32x3" if precision == "fp32" else "tf32", relaxed=precision == "relaxed",
                           layout=_channels_last_layout(pattern), nhwc_channels=NHWC_CHANNELS,
                           first=dict(pattern.params).get("full", min(set(range(max(pattern.inputs, 1))) - set(pattern.scalars),
                                                                      default=0)),
                           attribute=attribute, kind=kind, unary=UNARY,
                           **dict(pattern.params), **params, **extra)
    if pattern.helpers:  # the problem's own classes the copied __init__ builds from, before ModelNew
        marker = "\nclass ModelNew(nn.Module):"
        if marker not in source:
            raise ValueError(f"template {kind!r} has no `class ModelNew(nn.Module):` to put the problem's helpers before")
        source = source.replace(marker, "\n" + pattern.helpers + "\n" + marker, 1)
    return with_cuda_math(source)


def _note_and_values(kind: str, pattern: Pattern, params: dict, precision: str = "fp32") -> tuple[str, dict]:
    """The note line (the source's first line, which the proposer parses back) and the values a
    CUTLASS variant's template needs beyond the pattern's."""
    if kind in matmul_variants.LIBRARY_KINDS:
        if not matmul_variants.accepts(kind, pattern) or not matmul_variants.valid(kind, params):
            raise ValueError(f"{kind} with {params} does not apply to this {pattern.kind} {dict(pattern.params)}")
        return matmul_variants.note(kind, params), matmul_variants.template_values(kind, pattern, params)
    if kind != pattern.kind and kind not in variants(pattern, precision):
        raise ValueError(f"template {kind!r} is not a variant of {pattern.kind!r} under the {precision} policy")
    return f"{kind}: block {params['block']}, {params['warps']} warps" + (
        f", chunk {params['chunk']}" if "chunk" in params else "") + (
        f", split {params['split']}" if params.get("split", 1) > 1 else "") + (
        ", kmajor 1" if params.get("kmajor") else "") + (
        f", tile {params['tile']}, {params['gemm_warps']} gemm warps" if "tile" in params else "") + (
        ", cuda graph" if params.get("cudagraph") else "") + (", channels last" if params.get("channels_last") else "") + (
        ", nhwc" if params.get("nhwc") else "") + (", cublas" if params.get("cublas") else "") + (
        ", float64 scans" if params.get("scan64") else ""), {}


def attribute(path: str) -> str:
    """``self.<path>`` as Python source; parts that are not identifiers (``layers.0.weight`` from an
    nn.ModuleList) go through getattr, which nn.Module resolves the same way fx named them."""
    expr = "self"
    for part in path.split("."):
        expr = f"{expr}.{part}" if part.isidentifier() and not keyword.iskeyword(part) else f"getattr({expr}, {part!r})"
    return expr


def generate(problem, moves: dict | None = None, precision: str = "fp32") -> tuple[str | None, Pattern]:
    """(source or None, the captured pattern); None when no template covers the problem."""
    pattern = capture(problem)
    if pattern.kind not in TEMPLATES:
        return None, pattern
    return render(pattern, moves, precision), pattern
