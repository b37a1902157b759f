import torch
import torch.nn as nn


class Model(nn.Module):
    """Log-softmax over the last dimension (KernelBench level 1's 24_LogSoftmax, at toy sizes)."""

    def __init__(self, dim: int = 1):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x):
        return torch.log_softmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(6, 3001) * 4]


def get_init_inputs():
    return []
