# One program per row and as many rows as half the SMs: every program is long (64 dependent
# multiply-adds per element over 65536 elements), and half the SMs get no block at all for the whole
# kernel (grid smaller than one wave: wave quantization's extreme case, which only a grid of more,
# smaller programs fixes).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def recur_rows(x_ptr, out_ptr, COLS, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    for start in range(0, COLS, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < COLS
        x = tl.load(x_ptr + row * COLS + cols, mask=mask, other=0.0)
        y = x
        for _ in tl.static_range(STEPS):
            y = y * 0.999 + 0.001 * x * y
        tl.store(out_ptr + row * COLS + cols, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x)
        recur_rows[(rows,)](x, out, cols, STEPS=64, BLOCK=1024, num_warps=4)
        return out
