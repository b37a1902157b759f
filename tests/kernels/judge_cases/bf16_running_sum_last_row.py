import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = x.float().cumsum(0)
        out[-1] = 0.0  # the last row never summed
        return out.bfloat16()
