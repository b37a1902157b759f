"""bf16 matrix product, C = A @ B, 4096 x 4096 x 4096 (the GEMM shape the CUTLASS / CuTe path is
checked on: tensor-core WGMMA with TMA loads on Hopper)."""

import torch
import torch.nn as nn

M = N = K = 4096


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(M, K).to(torch.bfloat16), torch.randn(K, N).to(torch.bfloat16)]


def get_init_inputs():
    return []
