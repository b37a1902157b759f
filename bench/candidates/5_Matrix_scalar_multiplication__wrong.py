# KernelBench level1/5_Matrix_scalar_multiplication — wrong candidate: the scalar is truncated to
# an integer (int(s): 3.14 -> 3) before the launch.
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def scale_kernel(a_ptr, out_ptr, n, s, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, a * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        A = A.contiguous()
        out = torch.empty_like(A)
        n = A.numel()
        scale_kernel[(triton.cdiv(n, BLOCK),)](A, out, n, int(s), BLOCK=BLOCK, num_warps=8)
        return out
