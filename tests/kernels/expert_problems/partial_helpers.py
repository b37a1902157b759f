"""A small ResNet-like model built the way KernelBench's level-3 networks are: a module-level
block class with a class attribute, a helper method that stacks blocks, a module-level constant.
ModelNew can hold the same weights only by copying the helpers along with __init__."""

import torch
import torch.nn as nn

WIDTH = 6


class Block(nn.Module):
    expansion = 1

    def __init__(self, channels, stride=1):
        super(Block, self).__init__()
        self.conv = nn.Conv2d(channels, channels * self.expansion, 3, stride=stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels * self.expansion)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class Model(nn.Module):
    growth = 2

    def __init__(self, blocks=2):
        super(Model, self).__init__()
        self.stem = nn.Conv2d(3, WIDTH, 3, padding=1)
        self.layer = self._make_layer(blocks)
        self.head = nn.Linear(WIDTH * self.growth // 2, 5)

    def _make_layer(self, blocks):
        return nn.Sequential(*[Block(WIDTH) for _ in range(blocks)])

    def forward(self, x):
        x = self.layer(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(3, 3, 8, 7)]


def get_init_inputs():
    return []
