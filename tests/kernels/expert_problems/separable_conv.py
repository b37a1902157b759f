import torch
import torch.nn as nn


class Model(nn.Module):
    """A depthwise-separable convolution, as KernelBench L1/86: a depthwise nn.Conv2d (one filter per
    channel) and then a pointwise 1x1 one; asymmetric kernel, stride, padding and dilation."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple, stride: tuple = (1, 1),
                 padding: tuple = (0, 0), dilation: tuple = (1, 1), bias: bool = False):
        super(Model, self).__init__()
        self.depthwise = nn.Conv2d(in_channels, in_channels, kernel_size, stride=stride, padding=padding,
                                   dilation=dilation, groups=in_channels, bias=bias)
        self.pointwise = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.depthwise(x)
        x = self.pointwise(x)
        return x


def get_inputs():
    return [torch.randn(2, 20, 9, 11)]


def get_init_inputs():
    return [20, 24, (3, 2), (2, 1), (1, 2), (2, 1), True]
