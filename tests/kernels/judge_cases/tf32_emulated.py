import torch
import torch.nn as nn


def _tf32(t):
    # TF32 keeps 10 of float32's 23 mantissa bits: what a tensor core's tf32 dot does to its inputs
    return (t.contiguous().view(torch.int32) & -8192).view(torch.float32)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.clamp_min(torch.mm(_tf32(x), _tf32(y)), 0) * self.scale
