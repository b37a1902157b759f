import torch
import torch.nn as nn


class Something(nn.Module):
    pass
