import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, out):
        out.copy_(x.float().sum(1).bfloat16())  # fp32 accumulation, one rounding: nearer the truth
        return out
