import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.relu((x * 0.5) @ y)
        x.mul_(0.25)
        return out
