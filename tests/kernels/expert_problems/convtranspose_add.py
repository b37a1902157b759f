import torch
import torch.nn as nn


class Model(nn.Module):
    """A transposed 3-D convolution whose output is added to a second input, then HardSwish
    (KernelBench level 2's 26_ConvTranspose3d_Add_HardSwish, at toy sizes)."""

    def __init__(self):
        super(Model, self).__init__()
        self.conv_transpose = nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x, add_input):
        x = self.conv_transpose(x)
        x = x + add_input
        return x * torch.nn.functional.hardswish(x)


def get_inputs():
    return [torch.randn(2, 2, 3, 4, 5), torch.randn(2, 3, 6, 8, 10)]


def get_init_inputs():
    return []
