import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, GELU (tanh approximation), LayerNorm."""

    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.linear = nn.Linear(dim_in, dim_out)
        self.norm = nn.LayerNorm(dim_out)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.linear(x), approximate="tanh"))


def get_inputs():
    return [torch.randn(4096, 1024)]


def get_init_inputs():
    return [1024, 2048]
