"""An MLP with per-column work after its second layer (KernelBench 3/1's shape of problem with a
2/76-like epilogue): every nn.Linear a Triton GEMM, the ReLU and the scale-and-shift fused into
the GEMM before them, a bias-free last layer; ragged sizes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, sizes=(37, 70, 45, 9)):
        super().__init__()
        self.first = nn.Linear(sizes[0], sizes[1])
        self.second = nn.Linear(sizes[1], sizes[2])
        self.shift = nn.Parameter(torch.randn(sizes[2]))
        self.last = nn.Linear(sizes[2], sizes[3], bias=False)

    def forward(self, x):
        x = torch.relu(self.first(x))
        x = self.second(x) * 0.5 + self.shift
        return self.last(torch.tanh(x))


def get_inputs():
    return [torch.randn(33, 37)]


def get_init_inputs():
    return []
