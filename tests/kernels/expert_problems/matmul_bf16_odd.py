"""bf16 C = A @ B with K = 100, not a multiple of 8: A's rows are not whole 16-byte vectors, so only
the Triton template applies."""

import torch
import torch.nn as nn

M = 64
K = 100
N = 48


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A @ B


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
