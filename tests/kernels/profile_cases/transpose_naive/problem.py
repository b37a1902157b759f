import torch
import torch.nn as nn

M = 8192
N = 8192


class Model(nn.Module):
    def forward(self, x):
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []
