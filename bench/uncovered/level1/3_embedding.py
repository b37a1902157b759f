import torch
import torch.nn as nn


class Model(nn.Module):
    """An embedding lookup."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)

    def forward(self, ids):
        return self.emb(ids)


def get_inputs():
    return [torch.randint(0, 32000, (16, 512))]


def get_init_inputs():
    return [32000, 1024]
