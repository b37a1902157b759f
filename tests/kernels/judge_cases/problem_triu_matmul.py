import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.triu(torch.matmul(A, B))


def get_inputs():
    return [torch.triu(torch.rand(48, 48)), torch.triu(torch.rand(48, 48))]


def get_init_inputs():
    return []
