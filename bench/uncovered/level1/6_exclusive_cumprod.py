import torch
import torch.nn as nn


class Model(nn.Module):
    """An exclusive cumulative product along the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        shifted = torch.cat([torch.ones_like(x[..., :1]), x[..., :-1]], dim=-1)
        return torch.cumprod(shifted, dim=-1)


def get_inputs():
    return [1.0 + 0.001 * torch.randn(128, 4000)]


def get_init_inputs():
    return []
