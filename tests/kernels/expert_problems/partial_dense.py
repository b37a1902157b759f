import torch
import torch.nn as nn


class DenseBlock(nn.Module):
    """KernelBench L3/16's dense block, small: BatchNorm, in-place ReLU, convolution and a dropout of
    p = 0 per layer, each layer's output concatenated to its input; forwards annotated with
    torch.Tensor (fx binds the annotation to a global of its own)."""

    def __init__(self, num_layers: int, num_input_features: int, growth_rate: int):
        super(DenseBlock, self).__init__()
        self.layers = nn.ModuleList([self._make_layer(num_input_features + i * growth_rate, growth_rate)
                                     for i in range(num_layers)])

    def _make_layer(self, in_features: int, growth_rate: int):
        return nn.Sequential(nn.BatchNorm2d(in_features), nn.ReLU(inplace=True),
                             nn.Conv2d(in_features, growth_rate, kernel_size=3, padding=1, bias=False),
                             nn.Dropout(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(x))
            x = torch.cat(features, 1)
        return x


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()
        self.block = DenseBlock(2, 4, 2)
        self.final_bn = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.final_bn(self.block(x))).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(2, 4, 5, 3)]


def get_init_inputs():
    return []
