"""MoE expert block forward in Triton (a candidate for moe_forward.py): the routes sorted by expert,
then two grouped GEMMs over the sorted rows, each block of rows belonging to one expert.

1. ``(token, slot)`` pairs sorted by expert (a stable argsort), and a map from each block of
   BLOCK_M sorted rows to its expert and first row, built on the device from per-expert counts
   (the grid is launched at its upper bound, ceil(rows / BLOCK_M) + experts; unused blocks exit).
2. ``gate_up``: the block's token rows of x gathered straight from x, times the expert's gate and
   up columns (two fp32 accumulators), SwiGLU applied, the activation stored in sorted order (bf16).
   Every intermediate is rounded to bf16 where the reference's is (gate, up, silu(gate), the
   activation, the expert's output), so the two differ by summation order, not by rounding points.
3. ``down``: the activation rows times the expert's down matrix, scaled by the route's weight and
   written to the route's own row of a [tokens * k, hidden] buffer; a token's k rows are summed
   after (no atomics: a duplicate route is one more row, so it counts twice, deterministically).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

HIDDEN, INTERMEDIATE, EXPERTS = 2048, 768, 128


@triton.jit
def _gate_up(x_ptr, w_ptr, act_ptr, token_ptr, block_expert_ptr, block_row_ptr, block_rows_ptr, n_blocks_ptr,
             H: tl.constexpr, F: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    b = tl.program_id(0)
    if b >= tl.load(n_blocks_ptr):
        return
    e = tl.load(block_expert_ptr + b).to(tl.int64)
    row0 = tl.load(block_row_ptr + b)
    nrows = tl.load(block_rows_ptr + b)
    rm = tl.arange(0, BLOCK_M)
    mask_m = rm < nrows
    token = tl.load(token_ptr + row0 + rm, mask=mask_m, other=0).to(tl.int64)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    w_base = w_ptr + e * H * 2 * F
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        a = tl.load(x_ptr + token[:, None] * H + (k0 + rk)[None, :], mask=mask_m[:, None], other=0.0)
        wg = tl.load(w_base + (k0 + rk)[:, None] * (2 * F) + rn[None, :])
        wu = tl.load(w_base + (k0 + rk)[:, None] * (2 * F) + F + rn[None, :])
        acc_g = tl.dot(a, wg, acc_g)
        acc_u = tl.dot(a, wu, acc_u)
    # Rounded where the reference rounds (its gate and up products, silu(gate) and the activation
    # are bf16 tensors), so the candidate differs from it by accumulation order only.
    dtype = act_ptr.dtype.element_ty
    gate = acc_g.to(dtype).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
    act = silu * acc_u.to(dtype).to(tl.float32)
    rows = (row0 + rm).to(tl.int64)
    tl.store(act_ptr + rows[:, None] * F + rn[None, :], act.to(act_ptr.dtype.element_ty), mask=mask_m[:, None])


@triton.jit
def _down(act_ptr, w_ptr, out_ptr, pair_ptr, weight_ptr, block_expert_ptr, block_row_ptr, block_rows_ptr,
          n_blocks_ptr, H: tl.constexpr, F: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          BLOCK_K: tl.constexpr):
    b = tl.program_id(0)
    if b >= tl.load(n_blocks_ptr):
        return
    e = tl.load(block_expert_ptr + b).to(tl.int64)
    row0 = tl.load(block_row_ptr + b)
    nrows = tl.load(block_rows_ptr + b)
    rm = tl.arange(0, BLOCK_M)
    mask_m = rm < nrows
    rows = (row0 + rm).to(tl.int64)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    w_base = w_ptr + e * F * H
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, F, BLOCK_K):
        a = tl.load(act_ptr + rows[:, None] * F + (k0 + rk)[None, :], mask=mask_m[:, None], other=0.0)
        w = tl.load(w_base + (k0 + rk)[:, None] * H + rn[None, :])
        acc = tl.dot(a, w, acc)
    pair = tl.load(pair_ptr + rows, mask=mask_m, other=0).to(tl.int64)
    weight = tl.load(weight_ptr + pair, mask=mask_m, other=0.0).to(tl.float32)
    y = acc.to(act_ptr.dtype.element_ty).to(tl.float32)  # the reference's expert output is bf16
    tl.store(out_ptr + pair[:, None] * H + rn[None, :], y * weight[:, None], mask=mask_m[:, None])


def route_blocks(topk_ids: torch.Tensor, experts: int, block_m: int):
    """Sorted routes and the block map, all on the device and without a host sync: the sorted
    pairs (token * k + slot), their tokens, and per block its expert, first row and row count,
    with the number of blocks in use (a one-element tensor)."""
    k = topk_ids.shape[1]
    flat = topk_ids.reshape(-1)
    pair = torch.argsort(flat, stable=True)
    token = (pair // k).to(torch.int32)
    counts = torch.bincount(flat, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    blocks = (counts + block_m - 1) // block_m
    block_end = torch.cumsum(blocks, 0)
    upper = (flat.numel() + block_m - 1) // block_m + experts
    b = torch.arange(upper, device=flat.device)
    expert = torch.searchsorted(block_end, b, right=True).clamp_(max=experts - 1)
    first = block_end[expert] - blocks[expert]
    row = starts[expert] + (b - first) * block_m
    rows = (starts[expert] + counts[expert] - row).clamp_(0, block_m)
    return (pair.to(torch.int32), token, expert.to(torch.int32), row.to(torch.int32), rows.to(torch.int32),
            block_end[-1:].to(torch.int32), upper)


class ModelNew(nn.Module):
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64

    def __init__(self, hidden=HIDDEN, intermediate=INTERMEDIATE, experts=EXPERTS):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.gate_up = nn.Parameter((torch.randn(experts, hidden, 2 * intermediate, generator=g)
                                     * hidden ** -0.5).to(torch.bfloat16))
        self.down = nn.Parameter((torch.randn(experts, intermediate, hidden, generator=g)
                                  * intermediate ** -0.5).to(torch.bfloat16))

    def forward(self, x, topk_ids, topk_weights):
        tokens, hidden = x.shape
        k = topk_ids.shape[1]
        experts, _, two_f = self.gate_up.shape
        f = two_f // 2
        bm, bn, bk = self.BLOCK_M, self.BLOCK_N, self.BLOCK_K
        assert hidden % bk == 0 and hidden % bn == 0 and f % bn == 0 and f % bk == 0, "sizes must be block multiples"
        pair, token, expert, row, rows, n_blocks, upper = route_blocks(topk_ids, experts, bm)
        x = x.contiguous()
        act = torch.empty(tokens * k, f, device=x.device, dtype=x.dtype)
        _gate_up[(upper, f // bn)](x, self.gate_up, act, token, expert, row, rows, n_blocks, hidden, f, bm, bn, bk)
        per_route = torch.empty(tokens * k, hidden, device=x.device, dtype=torch.float32)
        weights = topk_weights.reshape(-1).contiguous()
        _down[(upper, hidden // bn)](act, self.down, per_route, pair, weights, expert, row, rows, n_blocks,
                                     hidden, f, bm, bn, bk)
        return per_route.view(tokens, k, hidden).sum(dim=1).to(x.dtype)
