import torch
import torch.nn as nn


class Model(nn.Module):
    """A lone grouped convolution: no template covers it (the implicit GEMM takes groups 1)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, groups=2)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.rand(1, 4, 8, 8)]


def get_init_inputs():
    return []
