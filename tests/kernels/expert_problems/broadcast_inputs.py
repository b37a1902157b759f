import torch
import torch.nn as nn


class Model(nn.Module):
    """Inputs of different shapes that broadcast together (KernelBench L1/12's diag(a) @ B is
    a.unsqueeze(1) * B): a per-row vector through a view, a per-column one as given."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b, c):
        return torch.tanh(a.unsqueeze(1) * b) + c


def get_inputs():
    return [torch.rand(37), torch.randn(37, 129), torch.randn(129)]


def get_init_inputs():
    return []
