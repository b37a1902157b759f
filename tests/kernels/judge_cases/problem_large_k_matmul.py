"""C = A^T @ B^T with zero-mean operands and a long reduction (K = 4095, odd): two correct fp32
summation orders differ by more than atol = rtol = 1e-4 on outputs near zero."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a.T, b.T)


def get_inputs():
    return [torch.randn(4095, 192), torch.randn(160, 4095)]


def get_init_inputs():
    return []
