import torch
import torch.nn as nn


class Model(nn.Module):
    """A cumulative sum along the last dimension, as KernelBench level 1's 89-93 (cumsum, cumprod,
    reversed, masked); the tests rewrite the forward to cover each."""

    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.rand(5, 2999)]


def get_init_inputs():
    return [1]
