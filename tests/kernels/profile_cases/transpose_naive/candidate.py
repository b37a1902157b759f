# Transpose with one program per input row: loads are contiguous, but neighbouring threads store
# M elements apart, so every store touches its own 32-byte sector (uncoalesced).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def transpose_rows(x_ptr, out_ptr, M, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        v = tl.load(x_ptr + row * N + cols, mask=mask)
        tl.store(out_ptr + cols * M + row, v, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        M, N = x.shape
        out = torch.empty((N, M), dtype=x.dtype, device=x.device)
        transpose_rows[(M,)](x, out, M, N, BLOCK=1024, num_warps=4)
        return out
