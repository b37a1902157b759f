import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = F.elu(x) + F.selu(x) + F.softplus(x) + F.hardsigmoid(x)
        b = F.softsign(x) + torch.tanh(x) + F.silu(x) + F.hardtanh(x, -0.5, 0.5)
        return a * b + torch.relu(x) - torch.abs(x) / 3.0


def get_inputs():
    return [torch.randn(300, 77) * 3]


def get_init_inputs():
    return []
