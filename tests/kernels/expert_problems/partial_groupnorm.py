"""A convolution, an elementwise chain with a per-channel bias, then GroupNorm (KernelBench 2/21's
shape of problem, small): no whole-forward template; the chain is one fused pass between the
two modules that stay in PyTorch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels=3, out_channels=8, kernel_size=3, groups=4, scale=1.7):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))
        self.scale = scale
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = x + self.bias
        x = x * self.scale
        x = torch.sigmoid(x)
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 3, 13, 11)]


def get_init_inputs():
    return []
