"""Honest candidate: each row minus its mean, one program per row (a block-wise sum, then a pass
that subtracts)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def center_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * row_stride
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        acc += tl.load(x_ptr + base + start + cols, mask=mask, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0)
        tl.store(out_ptr + base + start + cols, x - mean, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        center_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=512)
        return out
