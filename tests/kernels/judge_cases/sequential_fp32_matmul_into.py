import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b, out):
        # sequential_fp32_matmul.py's loop (fp32, one multiply-add per k in order), into the caller's out
        out.zero_()
        for k in range(a.shape[0]):
            out.addcmul_(a[k].unsqueeze(1), b[:, k].unsqueeze(0))
        return out
