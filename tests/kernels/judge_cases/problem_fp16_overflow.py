"""An fp16 problem whose output overflows in its own dtype: ``x * 60000`` is +-inf wherever |x|
exceeds about 1.09, where float64 is finite."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 60000.0


def get_inputs():
    return [torch.randn(64, 64, dtype=torch.float16)]


def get_init_inputs():
    return []
