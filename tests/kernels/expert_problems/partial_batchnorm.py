"""A convolution, a BatchNorm in training mode (batch statistics, running statistics updated) and
a ReLU with a per-channel scale after it (the shape of KernelBench's L3 convolution blocks, small):
no whole-forward template; the graph_norm plan runs the norm and what follows it in Triton."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels=3, out_channels=6, kernel_size=3):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)

    def forward(self, x):
        x = self.bn(self.conv(x))
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(4, 3, 12, 10)]


def get_init_inputs():
    return []
