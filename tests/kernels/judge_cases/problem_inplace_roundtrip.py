import torch
import torch.nn as nn


class Model(nn.Module):
    """Rescales x in place by 3 and back: the caller's x comes back within an ulp of what it was."""

    def forward(self, x, y):
        x.div_(3.0).mul_(3.0)
        return torch.relu(x @ y)


def get_inputs():
    return [torch.rand(32, 16), torch.rand(16, 24)]


def get_init_inputs():
    return []
