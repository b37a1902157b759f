import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Reads only the upper triangles: correct for the problem's inputs, which are triangular."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.triu(torch.triu(A) @ torch.triu(B))
