"""A matmul whose sizes are all odd and not multiples of any tile: (33, 1023) @ (1023, 47)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(33, 1023), torch.rand(1023, 47)]


def get_init_inputs():
    return []
