"""MoE expert block forward and backward in Triton (a candidate for moe_forward_backward.py).

The routes are sorted by expert once (as in moe_forward_triton.py) and every product is a grouped
GEMM over the sorted rows, each block of rows belonging to one expert:

- forward: [G, U] = x[token] @ W_e (rows gathered from x), act = silu(G) * U, y = act @ D_e, each
  route's row scaled by its weight and written to its own row, summed per token after;
- backward, for the output gradient g: d act = (w * g[token]) @ D_e^T, then dG and dU from G and U
  (SwiGLU's derivative), d x = sum over a token's routes of [dG, dU] @ W_e^T (rows again, summed
  per token: duplicate routes count twice), and the weight gradients per expert, reduced over that
  expert's rows: d D_e = act^T @ (w * g[token]) and d W_e = x[token]^T @ [dG, dU].

No atomics anywhere: every sum is a loop inside one program or a sum over a token's k rows.

Numerics: every intermediate is rounded to x's dtype where the reference's autograd graph holds it
in that dtype, and the elementwise steps (silu, the products, silu's derivative) are the very torch
ops the reference's graph runs, so they agree bit for bit given the same GEMM outputs. d x is
summed as the reference's autograd sums it (bench/moe_backward_rounding_proxy.py measures it): each
expert's gather backward adds that expert's routes of a token one by one in bf16 (slots ascending),
and the engine adds the experts' bf16 gradients of x one by one in bf16, the last expert of the
forward loop first; ``_sum_routes`` adds a token's k pieces in that order with that rounding.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

HIDDEN, INTERMEDIATE, EXPERTS = 2048, 768, 128


@triton.jit
def _rows_mm(a_ptr, a_index_ptr, b_ptr, c_ptr, c_index_ptr, scale_ptr, pair_ptr,
             block_expert_ptr, block_row_ptr, block_rows_ptr, n_blocks_ptr,
             K: tl.constexpr, N: tl.constexpr, SBE: tl.constexpr, SBK: tl.constexpr, SBN: tl.constexpr,
             GATHER_A: tl.constexpr, SCATTER_C: tl.constexpr, SCALE_A: tl.constexpr, SCALE_C: tl.constexpr,
             ROUND: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[row] = A[row] @ B_e for the block's sorted rows (A's row gathered through a_index when
    GATHER_A, C's row scattered through c_index when SCATTER_C); the route's weight scales A's row
    (rounded to A's dtype) when SCALE_A, or the product when SCALE_C, after rounding it to A's dtype
    when ROUND: the rounding points of the bf16 reference. B_e[k, n] sits at
    b_ptr + e * SBE + k * SBK + n * SBN, so a transposed B is strides."""
    b = tl.program_id(0)
    if b >= tl.load(n_blocks_ptr):
        return
    e = tl.load(block_expert_ptr + b).to(tl.int64)
    row0 = tl.load(block_row_ptr + b)
    nrows = tl.load(block_rows_ptr + b)
    rm = tl.arange(0, BLOCK_M)
    mask_m = rm < nrows
    rows = (row0 + rm).to(tl.int64)
    if GATHER_A:
        a_rows = tl.load(a_index_ptr + rows, mask=mask_m, other=0).to(tl.int64)
    else:
        a_rows = rows
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if SCALE_A or SCALE_C:
        pair = tl.load(pair_ptr + rows, mask=mask_m, other=0).to(tl.int64)
        scale = tl.load(scale_ptr + pair, mask=mask_m, other=0.0).to(tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + a_rows[:, None] * K + (k0 + rk)[None, :], mask=mask_m[:, None], other=0.0)
        if SCALE_A:
            a = (a.to(tl.float32) * scale[:, None]).to(a_ptr.dtype.element_ty)
        w = tl.load(b_ptr + e * SBE + (k0 + rk)[:, None] * SBK + rn[None, :] * SBN)
        acc = tl.dot(a, w, acc)
    if ROUND:
        acc = acc.to(a_ptr.dtype.element_ty).to(tl.float32)
    if SCALE_C:
        acc = acc * scale[:, None]
    if SCATTER_C:
        c_rows = tl.load(c_index_ptr + rows, mask=mask_m, other=0).to(tl.int64)
    else:
        c_rows = rows
    tl.store(c_ptr + c_rows[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None])


@triton.jit
def _expert_outer(a_ptr, a_index_ptr, b_ptr, b_index_ptr, scale_ptr, pair_ptr, c_ptr, starts_ptr, counts_ptr,
                  M: tl.constexpr, N: tl.constexpr, GATHER_A: tl.constexpr, GATHER_B: tl.constexpr,
                  SCALE_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C_e = A[rows of e]^T @ B[rows of e] ([M, N] per expert), the reduction over the expert's
    sorted rows (A's and B's rows gathered through their index when asked, B's rows scaled by the
    route's weight when SCALE_B). An expert without routes gets zeros."""
    e = tl.program_id(0)
    pid = tl.program_id(1)
    n_tiles: tl.constexpr = N // BLOCK_N
    rm = (pid // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    start = tl.load(starts_ptr + e)
    count = tl.load(counts_ptr + e)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r0 in range(0, count, BLOCK_K):
        rk = r0 + tl.arange(0, BLOCK_K)
        mask_k = rk < count
        rows = (start + rk).to(tl.int64)
        if GATHER_A:
            a_rows = tl.load(a_index_ptr + rows, mask=mask_k, other=0).to(tl.int64)
        else:
            a_rows = rows
        if GATHER_B:
            b_rows = tl.load(b_index_ptr + rows, mask=mask_k, other=0).to(tl.int64)
        else:
            b_rows = rows
        a = tl.load(a_ptr + a_rows[None, :] * M + rm[:, None], mask=mask_k[None, :], other=0.0)
        bt = tl.load(b_ptr + b_rows[:, None] * N + rn[None, :], mask=mask_k[:, None], other=0.0)
        if SCALE_B:
            pair = tl.load(pair_ptr + rows, mask=mask_k, other=0).to(tl.int64)
            s = tl.load(scale_ptr + pair, mask=mask_k, other=0.0).to(tl.float32)
            bt = (bt.to(tl.float32) * s[:, None]).to(b_ptr.dtype.element_ty)
        acc = tl.dot(a, bt, acc)
    out = c_ptr + e.to(tl.int64) * M * N + rm[:, None] * N + rn[None, :]
    tl.store(out, acc.to(c_ptr.dtype.element_ty))


@triton.jit
def _round(x, DTYPE: tl.constexpr):
    """x (fp32) rounded to DTYPE and back. bf16 is rounded to nearest even on the bits, which
    Triton's CPU interpreter does faithfully too (its fp32 -> bf16 cast truncates)."""
    if DTYPE == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    else:
        return x.to(DTYPE).to(tl.float32)


@triton.jit
def _sum_routes(piece_ptr, order_ptr, expert_ptr, out_ptr, H: tl.constexpr, K: tl.constexpr,
                BLOCK_H: tl.constexpr):
    """out[t] = the token's K per-route pieces (row t * K + slot of piece) added in the order of
    order[t] (slots by expert descending, slot ascending; their experts in expert[t]) the way the
    reference's autograd adds them: a token's routes to one expert added one by one and rounded,
    that expert's sum then added to the running total and rounded."""
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    dtype: tl.constexpr = piece_ptr.dtype.element_ty
    slot = tl.load(order_ptr + t * K).to(tl.int64)
    e_prev = tl.load(expert_ptr + t * K)
    group = tl.load(piece_ptr + (t * K + slot) * H + cols).to(tl.float32)
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for j in tl.static_range(1, K):
        slot = tl.load(order_ptr + t * K + j).to(tl.int64)
        e = tl.load(expert_ptr + t * K + j)
        piece = tl.load(piece_ptr + (t * K + slot) * H + cols).to(tl.float32)
        same = e == e_prev
        acc = tl.where(same, acc, _round(acc + group, dtype))
        group = tl.where(same, _round(group + piece, dtype), piece)
        e_prev = e
    tl.store(out_ptr + t * H + cols, _round(acc + group, dtype).to(out_ptr.dtype.element_ty))


def autograd_order(topk_ids: torch.Tensor, experts: int):
    """Each token's slots in the order the reference's autograd adds their d x (experts descending,
    slots ascending within an expert), and those slots' experts, both [tokens, k] int32."""
    k = topk_ids.shape[1]
    slot = torch.arange(k, device=topk_ids.device)
    order = ((experts - 1 - topk_ids) * k + slot).argsort(dim=1)
    return order.to(torch.int32), topk_ids.gather(1, order).to(torch.int32)


def sum_routes(pieces: torch.Tensor, topk_ids: torch.Tensor, experts: int) -> torch.Tensor:
    """d x [tokens, hidden] from the per-route pieces [tokens * k, hidden] (row token * k + slot),
    summed as the reference's autograd sums them (``_sum_routes``)."""
    tokens, k = topk_ids.shape
    h = pieces.shape[1]
    order, expert = autograd_order(topk_ids, experts)
    out = torch.empty(tokens, h, device=pieces.device, dtype=pieces.dtype)
    block_h = min(1024, h & -h)
    _sum_routes[(tokens, h // block_h)](pieces, order, expert, out, h, k, block_h)
    return out


def route_blocks(topk_ids: torch.Tensor, experts: int, block_m: int):
    """Sorted routes and the block map, on the device without a host sync (see moe_forward_triton.py),
    plus each expert's first sorted row and route count for the weight gradients."""
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
    i32 = torch.int32
    return (pair.to(i32), token, expert.to(i32), row.to(i32), rows.to(i32), block_end[-1:].to(i32), upper,
            starts.to(i32), counts.to(i32))


class ModelNew(nn.Module):
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64

    def __init__(self, hidden=HIDDEN, intermediate=INTERMEDIATE, experts=EXPERTS):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.gate_up = nn.Parameter((torch.randn(experts, hidden, 2 * intermediate, generator=g)
                                     * hidden ** -0.5).to(torch.bfloat16))
        self.down = nn.Parameter((torch.randn(experts, intermediate, hidden, generator=g)
                                  * intermediate ** -0.5).to(torch.bfloat16))

    def _rows(self, a, b, c, route, n_cols, k_dim, strides, gather_a=None, scatter_c=None, scale_a=None,
              scale_c=None, round_acc=False):
        pair, token, expert, row, rows, n_blocks, upper = route[:7]
        dummy = pair
        scale = scale_a if scale_a is not None else scale_c
        _rows_mm[(upper, n_cols // self.BLOCK_N)](
            a, gather_a if gather_a is not None else dummy, b, c, scatter_c if scatter_c is not None else dummy,
            scale if scale is not None else a, pair, expert, row, rows, n_blocks, k_dim, n_cols, *strides,
            gather_a is not None, scatter_c is not None, scale_a is not None, scale_c is not None, round_acc,
            self.BLOCK_M, self.BLOCK_N, self.BLOCK_K)

    def _outer(self, a, b, c, route, m_dim, n_dim, gather_a=None, gather_b=None, scale=None):
        pair, starts, counts = route[0], route[7], route[8]
        experts = counts.shape[0]
        _expert_outer[(experts, (m_dim // self.BLOCK_M) * (n_dim // self.BLOCK_N))](
            a, gather_a if gather_a is not None else pair, b, gather_b if gather_b is not None else pair,
            scale if scale is not None else a, pair, c, starts, counts, m_dim, n_dim,
            gather_a is not None, gather_b is not None, scale is not None, self.BLOCK_M, self.BLOCK_N, self.BLOCK_K)

    def forward(self, x, topk_ids, topk_weights, grad_out):
        tokens, h = x.shape
        k = topk_ids.shape[1]
        experts, _, two_f = self.gate_up.shape
        f = two_f // 2
        assert h % 64 == 0 and f % 64 == 0, "hidden and intermediate sizes must be multiples of 64"
        wgu, wd = self.gate_up.detach(), self.down.detach()
        x, g = x.contiguous(), grad_out.contiguous()
        route = route_blocks(topk_ids, experts, self.BLOCK_M)
        pair, token = route[0], route[1]
        n = tokens * k
        weights = topk_weights.reshape(-1).float().contiguous()
        # forward
        gu = torch.empty(n, two_f, device=x.device, dtype=x.dtype)
        self._rows(x, wgu, gu, route, two_f, h, (h * two_f, two_f, 1), gather_a=token)
        # Intermediates are rounded to x's dtype where the reference's autograd graph holds them in
        # it (gate, up, silu(gate), the activation, each expert's output, w * g, d act, d silu,
        # d gate, d up, each route's d x), and the elementwise steps are the reference graph's own
        # ops (F.silu, the products, silu_backward), so both round alike.
        gate, up = gu[:, :f], gu[:, f:]
        silu = F.silu(gate)
        act = (silu * up).contiguous()
        per_route = torch.empty(n, h, device=x.device, dtype=torch.float32)
        self._rows(act, wd, per_route, route, h, f, (f * h, h, 1), scatter_c=pair, scale_c=weights, round_acc=True)
        out = per_route.view(tokens, k, h).sum(dim=1).to(x.dtype)
        # backward: d act = (w * g[token]) @ D_e^T, then SwiGLU's derivative
        d_act = torch.empty(n, f, device=x.device, dtype=x.dtype)
        self._rows(g, wd, d_act, route, f, h, (f * h, 1, h), gather_a=token, scale_a=weights)
        d_gu = torch.cat([torch.ops.aten.silu_backward(d_act * up, gate), d_act * silu], dim=1)
        # each route's d x piece in x's dtype (row token * k + slot), then summed per token in the
        # order and with the rounding of the reference's autograd
        pieces = torch.empty(n, h, device=x.device, dtype=x.dtype)
        self._rows(d_gu, wgu, pieces, route, h, two_f, (h * two_f, 1, two_f), scatter_c=pair)
        dx = sum_routes(pieces, topk_ids, experts)
        d_down = torch.empty_like(wd)
        self._outer(act, g, d_down, route, f, h, gather_b=token, scale=weights)
        d_gate_up = torch.empty_like(wgu)
        self._outer(x, d_gu, d_gate_up, route, h, two_f, gather_a=token)
        return out, dx, d_gate_up, d_down
