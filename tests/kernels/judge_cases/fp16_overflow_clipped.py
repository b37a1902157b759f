import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return (x.float() * 60000.0).clamp(-65504.0, 65504.0).half()  # the overflow clipped to the largest fp16
