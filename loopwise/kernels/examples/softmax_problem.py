"""Bundled example problem (KernelBench format): softmax over the last dimension of a wide matrix."""
import torch
import torch.nn as nn

# Large on a GPU, tiny on a CPU (where Triton runs in its interpreter).
ROWS, COLS = (4096, 8192) if torch.cuda.is_available() else (16, 300)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3]


def get_init_inputs():
    return []
