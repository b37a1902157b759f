import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale, slope):
        super().__init__()
        self.scale = scale
        self.act = nn.GELU()
        self.slope = slope

    def forward(self, x, y):
        z = self.act(x * self.scale + y)
        return torch.nn.functional.leaky_relu(torch.sigmoid(z) - 0.5, negative_slope=self.slope).clamp(max=0.3)


def get_inputs():
    return [torch.randn(37, 129), torch.rand(37, 129)]


def get_init_inputs():
    return [1.7, 0.05]
