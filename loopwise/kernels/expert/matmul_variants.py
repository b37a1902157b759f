"""The matrix product's CUDA C++ variants beside its Triton template: CUTLASS 3 on Hopper's WGMMA
for bf16 / fp16 (``matmul_cutlass``) and, under the relaxed policy, for fp32 in TF32
(``matmul_cutlass_tf32``: WGMMA reads TF32 operands K-major only, so an M- or N-major operand is
copied K-major first), and CUTLASS 2's 3xTF32 on ``mma.sync`` for fp32 under the fp32 policy
(``matmul_3xtf32``; with ``split`` > 1 as CUTLASS 2's parallel split-K: each K range's product
written as an fp32 partial, then one reduction kernel sums them, for products of few output tiles
and a long K), and the same CUTLASS 2 kernel with one TF32 product instead of three under
relaxed (``matmul_1xtf32``), offered only where K is split: WGMMA has no split-K here. Their
knobs, the knob combinations CUTLASS builds well, the problems each can take (CUTLASS reads
16-byte vectors, so each operand's contiguous extent must be a multiple of 8 16-bit or 4 fp32
elements), and the values their templates are rendered with.

A batch of products (``bmm``) has the WGMMA variants too, the same kernel in CUTLASS 3's batched
mode (``bmm_cutlass``, and ``bmm_cutlass_tf32`` under relaxed): ProblemShape (M, N, K, L) and a
batch stride per operand, 0 for an operand every product reads; each entry must start 16-byte
aligned, so the batch strides are whole 16-byte vectors too.

CUTLASS 3's own fp32-accurate collectives (``MainloopSm100TmaUmmaWarpSpecializedFastF32``, 9xBF16)
are for SM100 only; on Hopper 3xTF32 is the CUTLASS 2 ``OpMultiplyAddFastF32`` operator, built
for ``Sm80`` and run through ``mma.sync``.
"""

from __future__ import annotations

import hashlib

from loopwise.kernels.expert.pattern import Pattern

MATMUL_KINDS = ("matmul_cutlass", "matmul_3xtf32", "matmul_cutlass_tf32", "matmul_1xtf32")
BMM_KINDS = ("bmm_cutlass", "bmm_cutlass_tf32")  # the WGMMA kernels over a batch
LIBRARY_KINDS = (*MATMUL_KINDS, *BMM_KINDS)
MMA_SYNC_KINDS = ("matmul_3xtf32", "matmul_1xtf32")  # CUTLASS 2 on mma.sync: 3 or 1 TF32 products
# offered only where K is split: an unsplit relaxed product takes WGMMA's TF32, Hopper's fast path
SPLIT_ONLY_KINDS = ("matmul_1xtf32",)
WGMMA_KINDS = ("matmul_cutlass", "matmul_cutlass_tf32", "bmm_cutlass", "bmm_cutlass_tf32")
TF32_WGMMA_KINDS = ("matmul_cutlass_tf32", "bmm_cutlass_tf32")  # float operands, both read K-major
# the kinds for fp32 operands; the others take bf16 / fp16
_FP32_KINDS = ("matmul_3xtf32", "matmul_cutlass_tf32", "matmul_1xtf32", "bmm_cutlass_tf32")

# bf16 / fp16 on WGMMA. A tile is M x N x K of one CTA; WGMMA atoms are 64 rows, so M is a multiple
# of 64. Cooperative splits M over two consumer warp groups (M a multiple of 128, what the
# CollectiveBuilder's 2x1x1 atom layout needs); ping-pong gives each of its two warp groups a whole
# tile. Tiles are kept to 128 fp32 accumulators per consumer thread: 256 would exceed the 255
# registers a thread can address (128x256 ping-pong, 256x256 cooperative spill).
WGMMA_TILES = ["64x128x64", "128x128x64", "64x256x64", "128x256x64", "256x128x64"]
# TF32: the same M x N tiles with 32 fp32 elements (128 bytes, one swizzle row) along K per stage.
WGMMA_TF32_TILES = [tile.replace("x64", "x32") for tile in WGMMA_TILES]
CLUSTERS = ["1x1", "2x1", "1x2"]
SCHEDULES = ["cooperative", "pingpong"]
_SCHEDULE_TYPES = {
    "cooperative": ("cutlass::gemm::KernelTmaWarpSpecializedCooperative",
                    "cutlass::epilogue::TmaWarpSpecializedCooperative"),
    "pingpong": ("cutlass::gemm::KernelTmaWarpSpecializedPingpong", "cutlass::epilogue::TmaWarpSpecialized"),
}
_CONSUMER_THREADS = {"cooperative": 256, "pingpong": 128}
_MAX_ACCUMULATORS = 128

# fp32 through 3xTF32 on mma.sync (16x8x8 TF32). Threadblock tiles and warp arrangements are those
# CUTLASS's own profiler instantiates for this operator (generator.py,
# GenerateSM80_TensorOp_1688_fast_fp32_math); every warp holds a 32x64 or 64x32 (32x32 for the
# smallest) accumulator tile.
TF32X3_WARPS = {"64x64x32": (2, 2), "64x128x32": (2, 2), "128x64x32": (2, 2), "128x128x32": (4, 2),
                "256x64x32": (4, 2), "64x256x32": (2, 4)}
TF32X3_TILES = list(TF32X3_WARPS)
TF32X3_STAGES = [3, 4, 5]
# K ranges of the parallel split-K (1: the plain GEMM, no partials, no reduction kernel)
TF32X3_SPLITS = [1, 2, 4, 8, 16, 32, 64]
_SM90_SHARED_BYTES = 227 * 1024  # the most dynamic shared memory one Hopper block may have

SPACE = {"matmul_cutlass": {"tile": WGMMA_TILES, "cluster": CLUSTERS, "schedule": SCHEDULES},
         "matmul_3xtf32": {"tile": TF32X3_TILES, "stages": TF32X3_STAGES, "split": TF32X3_SPLITS},
         "matmul_cutlass_tf32": {"tile": WGMMA_TF32_TILES, "cluster": CLUSTERS, "schedule": SCHEDULES},
         "matmul_1xtf32": {"tile": TF32X3_TILES, "stages": TF32X3_STAGES, "split": TF32X3_SPLITS},
         "bmm_cutlass": {"tile": WGMMA_TILES, "cluster": CLUSTERS, "schedule": SCHEDULES},
         "bmm_cutlass_tf32": {"tile": WGMMA_TF32_TILES, "cluster": CLUSTERS, "schedule": SCHEDULES}}
DEFAULT_MOVES = {"matmul_cutlass": {"tile": "128x256x64", "cluster": "2x1", "schedule": "cooperative"},
                 "matmul_3xtf32": {"tile": "128x128x32", "stages": 3, "split": 1},
                 "matmul_cutlass_tf32": {"tile": "128x256x32", "cluster": "2x1", "schedule": "cooperative"},
                 "matmul_1xtf32": {"tile": "128x128x32", "stages": 3, "split": 1},
                 "bmm_cutlass": {"tile": "128x256x64", "cluster": "2x1", "schedule": "cooperative"},
                 "bmm_cutlass_tf32": {"tile": "128x256x32", "cluster": "2x1", "schedule": "cooperative"}}

_ALIGNMENT = {"float32": 4, "bfloat16": 8, "float16": 8}  # elements in 16 bytes
_ELEMENTS = {"bfloat16": ("cutlass::bfloat16_t", "torch::kBFloat16"),
             "float16": ("cutlass::half_t", "torch::kHalf"),
             "float32": ("float", "torch::kFloat32")}  # float operands: CUTLASS 3's builder picks TF32 WGMMA


def dims(text: str) -> tuple[int, ...]:
    """``"128x256x64"`` as ``(128, 256, 64)``."""
    return tuple(int(part) for part in text.split("x"))


def valid(kind: str, moves: dict) -> bool:
    """Whether CUTLASS builds ``moves`` for ``kind`` without failing a static_assert, spilling its
    accumulators or asking for more shared memory than a Hopper block has."""
    if kind in WGMMA_KINDS:
        if any(moves.get(knob) not in values for knob, values in SPACE[kind].items()):
            return False
        m, n, _ = dims(moves["tile"])
        schedule = moves["schedule"]
        if schedule == "cooperative" and m % 128:
            return False
        return m * n // _CONSUMER_THREADS[schedule] <= _MAX_ACCUMULATORS
    if kind in MMA_SYNC_KINDS:
        if (moves.get("tile") not in TF32X3_WARPS or moves.get("stages") not in TF32X3_STAGES
                or moves.get("split", 1) not in TF32X3_SPLITS):
            return False
        m, n, k = dims(moves["tile"])
        return moves["stages"] * (m + n) * k * 4 <= _SM90_SHARED_BYTES
    return True


def accepts(kind: str, pattern: Pattern) -> bool:
    """Whether ``kind`` can compute ``pattern``: a matrix product's kinds a ``matmul``, the batched
    kinds a ``bmm``; its dtype; and 16-byte aligned contiguous extents for the operands' layouts
    (the leading dimensions of A, B and C), and for a batch each entry's start (the batch strides
    of contiguous operands, an operand every product reads having none)."""
    if kind not in LIBRARY_KINDS or pattern.kind != ("bmm" if kind in BMM_KINDS else "matmul"):
        return False
    p = dict(pattern.params)
    if p.get("triangle"):  # one side of a diagonal kept: the Triton template's (it skips the other side's tiles)
        return False
    dtype = p.get("dtype", "float32")
    if (kind in _FP32_KINDS) != (dtype == "float32"):
        return False
    if kind in TF32_WGMMA_KINDS:  # A [M, K] and B held as [N, K], both K-major after the copies
        vectors = (p["k"], p["k"], p["n"])
    else:
        vectors = (p["m"] if p["trans_a"] else p["k"], p["k"] if p["trans_b"] else p["n"], p["n"])
    if kind in BMM_KINDS:  # and each entry's start
        m, n, k = p["m"], p["n"], p["k"]
        strides = ((m * k, p["shared_a"]), (k * n, p["shared_b"]), (m * n, False))
        vectors += tuple(stride for stride, shared in strides if not shared)
    return all(extent % _ALIGNMENT[dtype] == 0 for extent in vectors)


def library_variants(pattern: Pattern, precision: str, split_k: bool = False) -> list[str]:
    """The CUTLASS variants for a matrix product or a batch of them under ``precision``: WGMMA for
    bf16 / fp16; for fp32, 3xTF32 under the ``fp32`` policy (a matrix product's only), and under
    ``relaxed`` (where TF32 is allowed, 3xTF32's extra products buy nothing) WGMMA in TF32, or
    where K is split (``split_k``) the mma.sync kernel with one TF32 product. Where K is split only
    the variants that split it too."""
    dtype = dict(pattern.params).get("dtype", "float32")
    if pattern.kind == "bmm":
        kinds = ("bmm_cutlass",) if dtype != "float32" else ("bmm_cutlass_tf32",) if precision == "relaxed" else ()
    elif dtype == "float32":
        kinds = ("matmul_3xtf32",) if precision == "fp32" else ("matmul_cutlass_tf32", "matmul_1xtf32")
    else:
        kinds = ("matmul_cutlass",)
    kinds = [kind for kind in kinds if accepts(kind, pattern)]
    if split_k:
        return [kind for kind in kinds if "split" in SPACE[kind]]
    return [kind for kind in kinds if kind not in SPLIT_ONLY_KINDS]


def note(kind: str, moves: dict) -> str:
    """The first line of a rendered source: the variant and its knobs, which the proposer parses
    back (``matmul_cutlass: tile 128x256x64, cluster 2x1, schedule cooperative``); 3xTF32's split
    only where it splits K (``matmul_3xtf32: tile 128x128x32, stages 3, split 64``)."""
    return f"{kind}: " + ", ".join(f"{knob} {moves[knob]}" for knob in SPACE[kind]
                                   if not (knob == "split" and moves.get(knob, 1) == 1))


def template_values(kind: str, pattern: Pattern, moves: dict) -> dict:
    """What ``kind``'s template needs besides the pattern's parameters: tile and cluster extents,
    CUTLASS type names, and an extension name that changes with everything compiled into it
    (``load_inline`` caches modules by name within a process)."""
    p = dict(pattern.params)
    tile_m, tile_n, tile_k = dims(moves["tile"])
    tf32 = kind in TF32_WGMMA_KINDS  # both operands K-major: A row-major, B column-major
    values = {"tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k, "tf32": tf32,
              "layout_a": "ColumnMajor" if p["trans_a"] and not tf32 else "RowMajor",
              "layout_b": "ColumnMajor" if p["trans_b"] or tf32 else "RowMajor"}
    if kind in WGMMA_KINDS:
        cluster_m, cluster_n = dims(moves["cluster"])
        mainloop, epilogue = _SCHEDULE_TYPES[moves["schedule"]]
        element, scalar = _ELEMENTS[p["dtype"]]
        values.update(cluster_m=cluster_m, cluster_n=cluster_n, mainloop_schedule=mainloop,
                      epilogue_schedule=epilogue, element=element, torch_scalar=scalar)
    else:
        warps_m, warps_n = TF32X3_WARPS[moves["tile"]]
        values.update(warp_m=tile_m // warps_m, warp_n=tile_n // warps_n, warp_k=tile_k)
    compiled = (kind, p["dtype"], p["trans_a"], p["trans_b"], sorted(moves.items()))
    values["extension"] = f"lw_{kind}_{hashlib.sha256(repr(compiled).encode()).hexdigest()[:12]}"
    return values
