"""Honest candidate: fused Linear + bias + ReLU in Triton with 3xTF32 dots (fp32 accuracy).

nn.Linear only holds the weights, so that they match the reference under the same seed.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_relu_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       PRECISION: tl.constexpr = "tf32x3"):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + (k0 + rk[None, :]),
                    mask=(rm[:, None] < M) & (k0 + rk[None, :] < K), other=0.0)
        # W is (N, K); read it transposed as a (K, N) tile.
        w = tl.load(w_ptr + rn[None, :] * K + (k0 + rk[:, None]),
                    mask=(rn[None, :] < N) & (k0 + rk[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision=PRECISION)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    out = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], out, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, K = x.shape
        N = self.linear.out_features
        out = torch.empty((M, N), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        linear_relu_kernel[grid](x, self.linear.weight, self.linear.bias, out, M, N, K,
                                 BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        return out
