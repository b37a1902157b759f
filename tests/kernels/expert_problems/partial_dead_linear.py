import torch
import torch.nn as nn


class Model(nn.Module):
    """A GRU whose hidden state is returned while a Linear over its output is computed and dropped
    (KernelBench L3/36's shape): the Linear is dead code, not a part for a kernel."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 8, batch_first=True)
        self.fc = nn.Linear(8, 3)

    def forward(self, x, h0):
        out, state = self.gru(x, h0)
        out = self.fc(out[:, -1, :])
        return state * 2.0 + 1.0


def get_inputs():
    return [torch.randn(2, 5, 6), torch.randn(1, 2, 8)]


def get_init_inputs():
    return []
