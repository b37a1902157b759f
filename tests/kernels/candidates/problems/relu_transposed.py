"""ReLU whose output is a transposed (non-contiguous) view."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).t()


def get_inputs():
    return [torch.randn(300, 517)]


def get_init_inputs():
    return []
