import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x):
        return torch.topk(x, self.k, dim=-1).values


def get_inputs():
    return [torch.randn(6, 700)]


def get_init_inputs():
    return [5]
