"""A tensor the forward makes from a Python value (KernelBench 2/31's torch.tensor(constant)):
the trace keeps it as its own constant, which the generated forward makes again as the reference
does; the chain after it is one fused pass."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, constant=0.25):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.constant = constant

    def forward(self, x):
        x = torch.min(self.conv(x), torch.tensor(self.constant))
        return torch.tanh(x * 3.0) - 0.5


def get_inputs():
    return [torch.randn(2, 3, 7, 9)]


def get_init_inputs():
    return []
