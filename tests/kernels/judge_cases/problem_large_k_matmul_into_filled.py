"""problem_large_k_matmul_into.py with the caller's ``out`` already holding the product the
reference writes into it: the reference's write leaves the same bits, yet it writes ``out``, so a
candidate's other summation order there is judged as a written input (the outputs' rules), not as
a mutation of an input nothing writes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b, out):
        torch.matmul(a.T, b.T, out=out)
        return out


def get_inputs():
    a, b = torch.randn(4095, 192), torch.randn(160, 4095)
    return [a, b, torch.matmul(a.T, b.T)]


def get_init_inputs():
    return []
