"""C = A^T @ B^T with zero-mean operands and a long odd reduction (K = 4095): two correct fp32
summation orders differ by more than atol = rtol = 1e-4 on outputs near zero."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.T, B.T)


M, N, K = 4096, 6144, 4095


def get_inputs():
    return [torch.randn(K, M), torch.randn(N, K)]


def get_init_inputs():
    return []
