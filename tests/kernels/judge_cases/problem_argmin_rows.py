import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return (x * 2.0).argmin(dim=1)


def get_inputs():
    return [torch.rand(64, 100)]


def get_init_inputs():
    return []
