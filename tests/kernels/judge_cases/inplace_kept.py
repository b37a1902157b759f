import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        x.mul_(0.5)
        return torch.relu(x @ y)
