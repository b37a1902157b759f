"""Scaled dot-product attention of odd sizes: 37 queries, 45 keys, head dim 24, value dim 20."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(2, 3, 37, 24), torch.randn(2, 3, 45, 24), torch.randn(2, 3, 45, 20)]


def get_init_inputs():
    return []
