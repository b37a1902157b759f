import torch
import torch.nn as nn


class Model(nn.Module):
    """A tensor times a plain number passed to forward, as KernelBench level 1's
    5_Matrix_scalar_multiplication (with a shift, so the number is used twice)."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        return A * s - s


def get_inputs():
    return [torch.randn(37, 41), 3.14]


def get_init_inputs():
    return []
