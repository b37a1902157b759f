import torch
import torch.nn as nn


class Model(nn.Module):
    """A (C, 1, W) weight against (N, C, H, W): its non-1 dimensions are not one run of the input's."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 1, 7))

    def forward(self, x):
        return torch.relu(x * self.weight)


def get_inputs():
    return [torch.randn(2, 4, 5, 7)]


def get_init_inputs():
    return []
