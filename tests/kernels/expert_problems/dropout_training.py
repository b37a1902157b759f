import torch
import torch.nn as nn


class Model(nn.Module):
    """A Linear, then dropout in training mode (KernelBench L2/66's shape): the output is random."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        return torch.softmax(self.dropout(self.linear(x)), dim=1)


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
