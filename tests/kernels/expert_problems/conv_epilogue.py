import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench level 2's shape of problem: a convolution, then elementwise work on its output
    with a per-channel parameter (here like 1_Conv2D_ReLU_BiasAdd with a Mish and a clamp)."""

    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = x + self.bias
        x = torch.nn.functional.mish(x)
        return torch.clamp(x, min=-0.5, max=2.0)


def get_inputs():
    return [torch.randn(2, 3, 11, 13)]


def get_init_inputs():
    return [3, 5, 3, (5, 1, 1)]
