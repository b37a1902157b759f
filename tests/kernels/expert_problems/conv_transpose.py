import torch
import torch.nn as nn


class Model(nn.Module):
    """One transposed convolution, as KernelBench level 1's (57-81 with groups 1): asymmetric kernel,
    stride, padding, output padding and dilation, so that some stride phases have no window
    position at all (their outputs are the bias alone)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple, stride: tuple = (1, 1),
                 padding: tuple = (0, 0), output_padding: tuple = (0, 0), dilation: tuple = (1, 1),
                 bias: bool = False):
        super(Model, self).__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding,
                                                 dilation=dilation, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_transpose(x)


def get_inputs():
    return [torch.randn(2, 5, 6, 7)]


def get_init_inputs():
    return [5, 20, (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True]
