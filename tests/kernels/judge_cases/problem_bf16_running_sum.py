"""A bf16 problem whose reference is a running sum over 512 rows, rounding to bf16 at every
addition: once the sums reach a few thousand, an addition of about 7 rounds away (bf16's step there
is 16), so the reference is about a quarter off the true sums and a float64 run is no longer
"the same function" by the judge's 5% guard."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        y = x[0]
        rows = [y]
        for i in range(1, x.shape[0]):
            y = y + x[i]
            rows.append(y)
        return torch.stack(rows)


def get_inputs():
    return [(torch.randn(512, 32).abs() + 6.0).to(torch.bfloat16)]


def get_init_inputs():
    return []
