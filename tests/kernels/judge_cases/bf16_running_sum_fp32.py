import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.float().cumsum(0).bfloat16()  # fp32 accumulation, one rounding: near the true sums
