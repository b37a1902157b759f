import torch
import torch.nn as nn


def make_bias(n):
    return torch.linspace(-1.0, 1.0, n)


class Model(nn.Module):
    """__init__ calls a helper function of the problem file: the candidate copies it."""

    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(make_bias(cols))

    def forward(self, x):
        return torch.tanh(x + self.bias)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [16]
