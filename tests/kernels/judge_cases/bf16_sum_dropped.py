import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x[:, :-1].float().sum(1).bfloat16()  # forgets the last column
