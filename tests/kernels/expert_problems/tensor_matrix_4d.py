import torch
import torch.nn as nn

B = 2
I = 3
J = 5
L = 24
K = 20


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, W):
        return torch.einsum("bijl,lk->bijk", A, W)


def get_inputs():
    return [torch.randn(B, I, J, L), torch.randn(L, K)]


def get_init_inputs():
    return []
