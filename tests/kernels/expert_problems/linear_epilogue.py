import torch
import torch.nn as nn

batch_size = 37
in_features = 70
out_features = 45


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.shift = nn.Parameter(torch.randn(out_features) * 0.1)
        self.scale = scale

    def forward(self, x):
        y = self.fc(x)
        z = torch.sigmoid(y) * self.scale
        z = z - self.shift
        return torch.relu(z) + y


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 1.5]
