"""nn.Linear, a BatchNorm in training mode (batch statistics: stays in PyTorch), then a GELU and a
ReLU (KernelBench 2/41's shape of problem, small): the elementwise pass alone, or with the Linear
as a Triton GEMM as well."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(40, 24)
        self.norm = nn.BatchNorm1d(24)

    def forward(self, x):
        x = self.norm(self.gemm(x))
        return torch.relu(torch.nn.functional.gelu(x))


def get_inputs():
    return [torch.randn(19, 40)]


def get_init_inputs():
    return []
