"""Bundled example problem (KernelBench format): bias add, GELU (tanh form), scale."""
import torch
import torch.nn as nn

# Large on a GPU, tiny on a CPU (where Triton runs in its interpreter).
ROWS, COLS = (8192, 4096) if torch.cuda.is_available() else (64, 128)


class Model(nn.Module):
    def __init__(self, cols: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols) * 0.1)
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.gelu(x + self.bias, approximate="tanh") * self.scale


def get_inputs():
    return [torch.rand(ROWS, COLS)]


def get_init_inputs():
    return [COLS, 0.5]
