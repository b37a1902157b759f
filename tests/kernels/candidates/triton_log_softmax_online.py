"""Honest candidate: log_softmax over rows of any length, one program per row walking the row in
blocks: an online max / sum-of-exponentials pass, then a pass that writes x - max - log(sum)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * row_stride
    cols = tl.arange(0, BLOCK)
    run_max = tl.full((BLOCK,), -float("inf"), tl.float32)
    run_sum = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + base + start + cols, mask=mask, other=-float("inf"))
        new_max = tl.maximum(run_max, x)
        # lanes that have seen nothing yet keep a zero sum (exp(-inf - -inf) would be NaN)
        scale = tl.where(new_max == -float("inf"), 0.0, tl.exp(run_max - new_max))
        run_sum = run_sum * scale + tl.where(mask, tl.exp(x - new_max), 0.0)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    lane_scale = tl.where(run_max == -float("inf"), 0.0, tl.exp(run_max - row_max))
    log_sum = tl.log(tl.sum(run_sum * lane_scale, axis=0))
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0)
        tl.store(out_ptr + base + start + cols, x - row_max - log_sum, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        block = 4096 if x.is_cuda else 1024
        log_softmax_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=block, num_warps=8 if x.is_cuda else 4)
        return out
