import torch
import torch.nn as nn


class Model(nn.Module):
    """Pooling, as KernelBench level 1's 41-46 (max with padding and dilation, average with or
    without counting the padding, 1-d to 3-d); the tests rewrite the module and the input."""

    def __init__(self):
        super(Model, self).__init__()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(2, 3, 17, 23)]


def get_init_inputs():
    return []
