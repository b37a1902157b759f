import torch
import torch.nn as nn


class Model(nn.Module):
    """logsumexp over a middle dimension (strips of inner columns, online rescaling across chunks)."""

    def forward(self, x):
        return torch.logsumexp(x, dim=1)


def get_inputs():
    return [torch.randn(4, 300, 17)]


def get_init_inputs():
    return []
