# KernelBench level1/20_LeakyReLU — wrong candidate: off-by-one load offset (x_ptr + offs + 1), so
# every output element holds its right neighbour's value.
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs + 1, mask=offs + 1 < n, other=0.0)
    y = tl.where(x >= 0.0, x, x * slope)
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        leaky_relu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, self.negative_slope, BLOCK=BLOCK, num_warps=8)
        return out
