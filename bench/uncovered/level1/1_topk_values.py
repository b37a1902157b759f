import torch
import torch.nn as nn


class Model(nn.Module):
    """The 8 largest values of each row."""

    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x):
        return torch.topk(x, self.k, dim=-1).values


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return [8]
