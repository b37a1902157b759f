import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return (x.float() * 60000.0).half()  # fp32 product, one rounding: the reference's own infinities
