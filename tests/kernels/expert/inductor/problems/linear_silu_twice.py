import torch
import torch.nn as nn


class Model(nn.Module):
    """A product returned as it is and read by a pointwise kernel (bias, SiLU): used twice."""

    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.linear = nn.Linear(dim_in, dim_out)

    def forward(self, x):
        y = x @ self.linear.weight.t()
        return torch.nn.functional.silu(y + self.linear.bias), y


def get_inputs():
    return [torch.randn(80, 40)]


def get_init_inputs():
    return [40, 72]
