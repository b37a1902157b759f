"""The planner's plan for one GEMM -> ReLU -> GEMM chain (an MLP block, or two 1x1 convolutions)
carried out on a GPU, with an SM's shared memory and registers as the scratchpad: the hierarchy
check of the memory engine (``bench/memory_gpu_check.py`` measures it with Nsight Compute).

    Y[m, o] = sum_h relu(sum_k X[m, k] W1[k, h]) W2[h, o]

The planner's plan for it on the ``gpu-sm-shared`` target is one group run in slabs of rows of X:
W1 and W2 stay resident, each slab of X is loaded once, the hidden activations H and R = relu(H)
never leave the chip and each slab of Y is stored once. :func:`fused` is that plan as one Triton
kernel: a program takes ``block_m`` rows (a slab), holds its rows of X, computes H a block of
``block_h`` hidden units at a time, applies the ReLU and accumulates that block's share of Y, so H
exists only in registers. :func:`unfused` is the layer-by-layer schedule (GEMM, ReLU, GEMM as three
kernels, H and R through DRAM), the planner's baseline.

The GPU has an L2 cache between the SMs and DRAM, which the scratchpad model leaves out. It does
not change the count for this plan: the weights, which every program reads again, are the
resident invariants (loaded once in the plan), and being small (64 KiB at the checked sizes) they
stay in L2 after the first reads; the streamed tensors are far larger than L2 (60 MiB), so each of
their bytes crosses DRAM once.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwise.errors import UserError
from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise
from loopwise.memory.plan_records import Plan
from loopwise.memory.planner import plan

# Registers bound a slab, not only shared memory: the program holds its rows of X and Y's
# accumulator (block_m x n2 fp32) and one block of H (block_m x block_h fp32) at once.
MAX_BLOCK_M = 128


@dataclass(frozen=True)
class Chain:
    """The chain's sizes: X is m x k, W1 k x n1, W2 n1 x n2; elements of ``elem_bytes``."""

    m: int
    k: int
    n1: int
    n2: int
    elem_bytes: int = 2
    relu: bool = True

    def __post_init__(self) -> None:
        for name in ("m", "k", "n1", "n2"):
            if getattr(self, name) < 1:
                raise UserError(f"chain size {name} = {getattr(self, name)}: must be at least 1")
        for name in ("k", "n1", "n2"):  # tl.arange and tl.dot need powers of two, at least 16
            v = getattr(self, name)
            if v < 16 or v & (v - 1):
                raise UserError(f"chain size {name} = {v}: the Triton kernels need a power of two >= 16")


def graph(c: Chain) -> Graph:
    """The chain as the planner's operators: gemm1 (X, W1 -> H), relu (H -> R), gemm2 (R, W2 -> Y)."""

    def gemm(name: str, a: str, b: str, out: str, m: int, k: int, n: int) -> Operator:
        return Operator(name, {"m": m, "n": n, "k": k},
                        (Tensor(a, (m, k), c.elem_bytes), Tensor(b, (k, n), c.elem_bytes),
                         Tensor(out, (m, n), c.elem_bytes)),
                        reads=(Access(a, ("m", "k")), Access(b, ("k", "n"))), writes=(Access(out, ("m", "n")),),
                        macs=m * n * k)

    hidden = "R" if c.relu else "H"
    ops = [gemm("gemm1", "X", "W1", "H", c.m, c.k, c.n1)]
    if c.relu:
        ops.append(elementwise("relu", (c.m, c.n1), ("H",), "R", c.elem_bytes))
    ops.append(gemm("gemm2", hidden, "W2", "Y", c.m, c.n1, c.n2))
    return Graph("mlp_chain", tuple(ops), weights=frozenset({"W1", "W2"}))


@dataclass(frozen=True)
class Launch:
    """What the fused kernel takes from the plan, and what the plan predicts for DRAM."""

    block_m: int  # rows of X per program: the plan's slab, capped by the register file
    block_h: int  # hidden units computed at a time inside a program
    slab_rows: int  # the plan's slab
    fused_bytes: int  # the plan's DRAM traffic
    layer_by_layer_bytes: int  # the baseline's: every operator alone, its best tiling
    compulsory_bytes: int
    plan: Plan


def launch_from_plan(c: Chain, capacity_bytes: int) -> Launch:
    """Plans the chain for a scratchpad of ``capacity_bytes`` and reads the fused kernel's
    parameters off the plan. Raises UserError when the plan does not fuse the chain into one group
    run in slabs of rows with both weights resident (the kernel implements only that plan)."""
    g = graph(c)
    p = plan(g, capacity_bytes)
    if len(p.groups) != 1:
        raise UserError(f"the plan for {c} at {capacity_bytes} bytes does not fuse the chain into one group "
                        f"({[gr.operators for gr in p.groups]}); the fused kernel implements only that plan")
    slab = p.groups[0].slab
    if slab is None:  # it all fits: one pass over whole tensors, which any slab size also moves once
        rows = c.m
    elif slab.dims != (("m", "d0", "m") if c.relu else ("m", "m")) or slab.outer_dims:
        raise UserError(f"the plan cuts the chain along {slab.dims}, not along the rows of X")
    elif set(slab.resident) != {"W1", "W2"}:
        raise UserError(f"the plan streams {sorted(slab.streamed)} instead of keeping both weights resident")
    else:
        rows = slab.size
    block_m = 1
    while block_m * 2 <= min(rows, MAX_BLOCK_M):
        block_m *= 2
    block_m = max(block_m, 16)  # tl.dot's smallest tile; below the slab the traffic is the same
    return Launch(block_m=block_m, block_h=min(64, c.n1), slab_rows=rows, fused_bytes=p.total_bytes,
                  layer_by_layer_bytes=p.layer_by_layer_bytes, compulsory_bytes=p.compulsory_bytes, plan=p)


# -- the kernels ------------------------------------------------------------------------------
def _kernels():
    """The Triton kernels, built on first use (importing triton is slow and the planner needs none)."""
    import triton
    import triton.language as tl

    @triton.jit
    def fused_mlp(x_ptr, w1_ptr, w2_ptr, y_ptr, M, K: tl.constexpr, N1: tl.constexpr, N2: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, RELU: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        live = rows < M
        kk = tl.arange(0, K)
        oo = tl.arange(0, N2)
        x = tl.load(x_ptr + rows[:, None] * K + kk[None, :], mask=live[:, None], other=0.0)
        acc = tl.zeros((BLOCK_M, N2), dtype=tl.float32)
        for j in range(0, N1, BLOCK_H):
            hh = j + tl.arange(0, BLOCK_H)
            h = tl.dot(x, tl.load(w1_ptr + kk[:, None] * N1 + hh[None, :]))
            if RELU:
                h = tl.maximum(h, 0.0)
            w2 = tl.load(w2_ptr + hh[:, None] * N2 + oo[None, :])
            acc = tl.dot(h.to(w2.dtype), w2, acc)
        tl.store(y_ptr + rows[:, None] * N2 + oo[None, :], acc.to(y_ptr.dtype.element_ty), mask=live[:, None])

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, K: tl.constexpr, N: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        live = rows < M
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rows[:, None] * K + kk[None, :], mask=live[:, None], other=0.0)
            acc = tl.dot(a, tl.load(b_ptr + kk[:, None] * N + cols[None, :]), acc)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty), mask=live[:, None])

    @triton.jit
    def relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = offs < n
        tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=live, other=0.0), 0.0), mask=live)

    return fused_mlp, matmul, relu


_KERNELS = None


def kernels():
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = _kernels()
    return _KERNELS


def _check(x, w1, w2):
    if x.dim() != 2 or w1.dim() != 2 or w2.dim() != 2 or x.shape[1] != w1.shape[0] or w1.shape[1] != w2.shape[0]:
        raise UserError(f"shapes do not chain: X {tuple(x.shape)}, W1 {tuple(w1.shape)}, W2 {tuple(w2.shape)}")
    Chain(x.shape[0], x.shape[1], w1.shape[1], w2.shape[1])  # the power-of-two checks
    return x.contiguous(), w1.contiguous(), w2.contiguous()


def fused(x, w1, w2, launch: Launch, relu: bool = True, num_warps: int = 4):
    """Y = relu(X W1) W2 in one kernel: H never leaves the SM."""
    import torch
    import triton

    x, w1, w2 = _check(x, w1, w2)
    m, k = x.shape
    n1, n2 = w2.shape
    y = torch.empty((m, n2), dtype=x.dtype, device=x.device)
    fused_mlp, _, _ = kernels()
    fused_mlp[(triton.cdiv(m, launch.block_m),)](x, w1, w2, y, m, K=k, N1=n1, N2=n2, BLOCK_M=launch.block_m,
                                                 BLOCK_H=launch.block_h, RELU=relu, num_warps=num_warps)
    return y


def unfused(x, w1, w2, relu: bool = True, block_m: int = 128, num_warps: int = 4):
    """The layer-by-layer schedule: GEMM, ReLU and GEMM as three kernels, H and R through DRAM."""
    import torch
    import triton

    x, w1, w2 = _check(x, w1, w2)
    m, k = x.shape
    n1, n2 = w2.shape
    _, matmul, relu_kernel = kernels()

    def gemm(a, b):
        kk, n = b.shape
        out = torch.empty((a.shape[0], n), dtype=a.dtype, device=a.device)
        bn, bk = min(n, 128), min(kk, 64)
        matmul[(triton.cdiv(a.shape[0], block_m), n // bn)](a, b, out, a.shape[0], K=kk, N=n, BLOCK_M=block_m,
                                                             BLOCK_N=bn, BLOCK_K=bk, num_warps=num_warps)
        return out

    h = gemm(x, w1)
    if relu:
        r = torch.empty_like(h)
        relu_kernel[(triton.cdiv(h.numel(), 4096),)](h, r, h.numel(), BLOCK=4096, num_warps=num_warps)
        h = r
    return gemm(h, w2)
