import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.relu(x @ y)  # x left as it was: within an ulp of what the reference leaves
