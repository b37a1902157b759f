import torch
import torch.nn as nn

INIT_SCALE = 0.1  # a literal global read by __init__: the generated file writes it down again


class Model(nn.Module):
    """Per-channel bias (C, 1, 1), a per-pixel gain (H, W) and a 0-dim shift on an NCHW input."""

    def __init__(self, channels, height, width):
        super(Model, self).__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1) * INIT_SCALE)
        self.register_buffer("gain", torch.rand(height, width) + 0.5)
        self.shift = torch.randn(())  # a plain 0-dim tensor attribute, neither parameter nor buffer

    def forward(self, x):
        return torch.sigmoid(x + self.bias) * self.gain - self.shift


def get_inputs():
    return [torch.randn(2, 6, 5, 7)]


def get_init_inputs():
    return [6, 5, 7]
