import torch
import torch.nn as nn


class Model(nn.Module):
    """RMS normalization over the feature dimension, as KernelBench level 1's 36_RMSNorm_
    (x / sqrt(mean(x**2, dim=1, keepdim=True) + eps)); the tests also rewrite it into 38 and 39."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super(Model, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


def get_inputs():
    return [torch.randn(3, 9, 13, 11)]


def get_init_inputs():
    return [9]
