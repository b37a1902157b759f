# Profiled without a candidate: a bias + GELU + scale chain in eager PyTorch on a large tensor, one
# full pass over memory per op where one fused pass would do (redundant passes).
import torch
import torch.nn as nn

ROWS = 8192
COLS = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(COLS))

    def forward(self, x):
        y = x + self.bias
        y = torch.nn.functional.gelu(y)
        y = y * 0.5
        return torch.tanh(y)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
