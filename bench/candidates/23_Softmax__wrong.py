# KernelBench level1/23_Softmax — wrong candidate: off-by-one row. Program i handles row i + 1 and
# the grid has n_rows - 1 programs, so row 0 of the output is never written.
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 2048


@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) + 1
    x_row = x_ptr + row * row_stride
    out_row = out_ptr + row * row_stride
    cols = tl.arange(0, BLOCK)
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf"))
        new_max = tl.maximum(run_max, x)
        # Lanes that have seen only padding keep max = -inf; shift by 0 there to avoid inf - inf.
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - shift) + tl.exp(x - shift)
        run_max = new_max
    row_max = tl.max(run_max, 0)
    total = tl.sum(run_sum * tl.exp(run_max - row_max), 0)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf"))
        tl.store(out_row + offs, tl.exp(x - row_max) / total, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        softmax_rows_kernel[(n_rows - 1,)](x, out, n_cols, x.stride(0), BLOCK=BLOCK, num_warps=8)
        return out
