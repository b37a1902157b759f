# One program per row, 133 rows on 132 SMs: the grid is one full wave and a second wave of one
# block, which runs alone for as long as the first wave took (tail effect / wave quantization).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum(x_ptr, out_ptr, COLS, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, COLS, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * COLS + cols, mask=cols < COLS, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty(rows, dtype=x.dtype, device=x.device)
        row_sum[(rows,)](x, out, cols, BLOCK=4096, num_warps=16)
        return out
