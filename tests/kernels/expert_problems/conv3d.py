import torch
import torch.nn as nn


class Model(nn.Module):
    """One nn.Conv3d, as KernelBench level 1's standard 3-D convolutions (54, 59, 60, 66: groups 1):
    asymmetric kernel, stride, padding and dilation so every index path is used."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple, stride: tuple = (1, 1, 1),
                 padding: tuple = (0, 0, 0), dilation: tuple = (1, 1, 1), bias: bool = False):
        super(Model, self).__init__()
        self.conv3d = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                dilation=dilation, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3d(x)


def get_inputs():
    return [torch.randn(2, 3, 7, 9, 11)]


def get_init_inputs():
    return [3, 20, (3, 2, 2), (2, 1, 1), (1, 0, 2), (1, 2, 1), True]
