"""The zoo's convolutional models beyond the ImageNet classics, in plain torch: ConvNeXt-T
(its authors' shapes) and a small U-Net whose decoder concatenates the encoder's feature maps.
"""

from __future__ import annotations


def convnext_t():
    """ConvNeXt-T at 224x224: stages of depths 3, 3, 9, 3 and widths 96, 192, 384, 768; each block a
    7x7 depthwise convolution, a LayerNorm over channels, an MLP of 4x width and a layer scale."""
    import torch
    import torch.nn as nn

    class ChannelNorm(nn.LayerNorm):
        """LayerNorm over the channels of an NCHW tensor."""

        def forward(self, x):
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.fc1, self.act, self.fc2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

        def forward(self, x):
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.gamma * self.fc2(self.act(self.fc1(y)))
            return x + y.permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768)) -> None:
            super().__init__()
            layers = [nn.Conv2d(3, dims[0], 4, 4), ChannelNorm(dims[0], eps=1e-6)]
            for i, (depth, dim) in enumerate(zip(depths, dims)):
                if i:
                    layers += [ChannelNorm(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
                layers += [Block(dim) for _ in range(depth)]
            self.features = nn.Sequential(*layers)
            self.norm, self.head = nn.LayerNorm(dims[-1], eps=1e-6), nn.Linear(dims[-1], 1000)

        def forward(self, x):
            return self.head(self.norm(self.features(x).mean((-2, -1))))

    return ConvNeXt()


def unet_small():
    """A U-Net of four levels (32, 64, 128, 256 channels, a 512-channel bottom) on 3x256x256: two
    3x3 convolutions per level, max pooling down, 2x2 transposed convolutions up, each decoder
    level concatenating the encoder's map of its size, a 1x1 convolution to 2 classes."""
    import torch
    import torch.nn as nn

    def double(cin: int, cout: int):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self, widths=(32, 64, 128, 256, 512)) -> None:
            super().__init__()
            ins = (3, *widths[:-1])
            self.down = nn.ModuleList(double(cin, cout) for cin, cout in zip(ins, widths))
            self.up = nn.ModuleList(nn.ConvTranspose2d(w, w // 2, 2, 2) for w in reversed(widths[1:]))
            self.dec = nn.ModuleList(double(w, w // 2) for w in reversed(widths[1:]))
            self.pool, self.out = nn.MaxPool2d(2), nn.Conv2d(widths[0], 2, 1)

        def forward(self, x):
            skips = []
            for i, block in enumerate(self.down):
                x = block(x if i == 0 else self.pool(x))
                skips.append(x)
            x = skips.pop()
            for up, dec in zip(self.up, self.dec):
                x = dec(torch.cat([skips.pop(), up(x)], dim=1))
            return self.out(x)

    return UNet()
