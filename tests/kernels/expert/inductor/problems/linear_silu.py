import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear then SiLU: a product Inductor leaves to the library, its bias
    and activation one pointwise kernel."""

    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.linear = nn.Linear(dim_in, dim_out)

    def forward(self, x):
        return torch.nn.functional.silu(self.linear(x))


def get_inputs():
    return [torch.randn(80, 40)]


def get_init_inputs():
    return [40, 72]
