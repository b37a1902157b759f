import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return (x.float() * 0.9).cumsum(0).bfloat16()  # a tenth of every row lost
