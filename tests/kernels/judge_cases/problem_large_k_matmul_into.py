"""problem_large_k_matmul.py's product written into the caller's ``out`` (``torch.matmul(...,
out=out)``) and returned: two correct fp32 summation orders differ by more than atol = rtol = 1e-4
on elements near zero, in the output and in the input alike."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b, out):
        torch.matmul(a.T, b.T, out=out)
        return out


def get_inputs():
    return [torch.randn(4095, 192), torch.randn(160, 4095), torch.empty(192, 160)]


def get_init_inputs():
    return []
