"""GELU (erf form) on bfloat16 activations, bfloat16 output."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)


def get_inputs():
    return [torch.randn(256, 1000, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
