"""The models of the memory engine's benchmark, built on the meta device (no weights are made):

- ``resnet50``, ``mobilenet_v2`` and ``efficientnet_b0``: the ImageNet networks with torchvision's
  layer shapes (25,557,032, 3,504,872 and 5,288,548 parameters), written here in plain torch so they build without
  torchvision (whose PyPI build does not import beside the CPU torch build loopwise tests with);
  ``torchvision:NAME`` takes torchvision's own definition where it is installed.
- ``bert-base`` and ``gpt2``: ``transformers``' BertModel and GPT2Model (no task head) from their
  default configurations (BERT-base, GPT-2 small), eager attention so that the attention's matrix
  products and softmax are operators of their own.
- ``vit_b16``, ``llama7b_layer_prefill`` and ``llama7b_layer_decode`` (:mod:`loopwise.memory.zoo_transformer`):
  ViT-B/16 at 224x224, and one Llama-7B-shaped decoder layer over a prompt (``--seq``, default 2048)
  or for one new token beside a key/value cache of ``--seq`` positions (default 4096).
- ``convnext_t`` and ``unet_small`` (:mod:`loopwise.memory.zoo_convnet`): ConvNeXt-T at 224x224 and a
  four-level U-Net on 3x256x256 with skip concatenations.

``build(spec, batch, seq)`` returns the module and its example inputs, both on the meta device.
"""

from __future__ import annotations

from loopwise.errors import UserError

VISION = ("resnet50", "mobilenet_v2", "efficientnet_b0")
TEXT = {"bert-base": 128, "gpt2": 1024}  # default sequence lengths (those of the memory engine's tables)
IMAGES = {"vit_b16": 224, "convnext_t": 224, "unet_small": 256}  # input side of each image model
LLAMA = {"llama7b_layer_prefill": 2048, "llama7b_layer_decode": 4096}  # default prompt / cache length
ZOO = (*VISION, *TEXT, *IMAGES, *LLAMA)


def _resnet50():
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
            self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + (x if self.down is None else self.down(x)))

    class ResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(count):
                    blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                    cin = width * 4
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))

    return ResNet50()


def _mobile_parts():
    """What MobileNetV2 and EfficientNet-B0 share: a convolution with its batch norm (and an
    activation), a block with a skip connection where shapes allow, and the 1280-feature head."""
    import torch.nn as nn

    def conv_bn(cin, cout, k, stride=1, groups=1, act=None):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + ([act(inplace=True)] if act else [])

    class Residual(nn.Module):
        def __init__(self, layers, residual: bool) -> None:
            super().__init__()
            self.body, self.residual = nn.Sequential(*layers), residual

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)  # eval: stochastic depth is identity

    class Classified(nn.Module):
        def __init__(self, layers) -> None:
            super().__init__()
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))

        def forward(self, x):
            return self.classifier(self.pool(self.features(x)).flatten(1))

    return nn, conv_bn, Residual, Classified


def _mobilenet_v2():
    nn, conv_bn, Residual, Classified = _mobile_parts()
    layers, cin = conv_bn(3, 32, 3, 2, act=nn.ReLU6), 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):  # inverted residual blocks
            stride, hidden = s if i == 0 else 1, cin * t
            body = conv_bn(cin, hidden, 1, act=nn.ReLU6) if t != 1 else []
            body += conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6) + conv_bn(hidden, c, 1)
            layers.append(Residual(body, stride == 1 and cin == c))
            cin = c
    return Classified(layers + conv_bn(cin, 1280, 1, act=nn.ReLU6))


def _efficientnet_b0():
    nn, conv_bn, Residual, Classified = _mobile_parts()

    class SqueezeExcite(nn.Module):
        def __init__(self, channels: int, squeeze: int) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
            self.act, self.gate = nn.SiLU(inplace=True), nn.Sigmoid()

        def forward(self, x):
            return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))

    layers, cin = conv_bn(3, 32, 3, 2, act=nn.SiLU), 32
    for expand, k, s, cout, repeats in ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                                        (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
        for i in range(repeats):  # MBConv blocks
            stride, hidden = s if i == 0 else 1, cin * expand
            body = conv_bn(cin, hidden, 1, act=nn.SiLU) if expand != 1 else []
            body += conv_bn(hidden, hidden, k, stride, groups=hidden, act=nn.SiLU)
            body += [SqueezeExcite(hidden, max(1, cin // 4))] + conv_bn(hidden, cout, 1)
            layers.append(Residual(body, stride == 1 and cin == cout))
            cin = cout
    return Classified(layers + conv_bn(cin, 1280, 1, act=nn.SiLU))


def _transformers(name: str):
    try:
        import transformers
    except ImportError:
        raise UserError(f"zoo:{name} needs the transformers package: pip install 'loopwise[models]'") from None
    if name == "bert-base":
        return transformers.BertModel(transformers.BertConfig(attn_implementation="eager"))
    return transformers.GPT2Model(transformers.GPT2Config(attn_implementation="eager", use_cache=False))


def _modern(name: str, batch: int, seq: int | None):
    """The models of :mod:`~loopwise.memory.zoo_transformer` and :mod:`~loopwise.memory.zoo_convnet`
    with their example inputs (called on the meta device)."""
    import torch

    from loopwise.memory import zoo_convnet, zoo_transformer

    if name in IMAGES:
        module = {"vit_b16": zoo_transformer.vit_b16, "convnext_t": zoo_convnet.convnext_t,
                  "unet_small": zoo_convnet.unet_small}[name]()
        side = IMAGES[name]
        return module.eval(), (torch.zeros(batch, 3, side, side),), {}
    length, dim = seq or LLAMA[name], zoo_transformer.LLAMA["dim"]
    module = zoo_transformer.llama7b_layer(decode=name.endswith("decode")).eval()
    if name.endswith("prefill"):
        return module, (torch.zeros(batch, length, dim),), {}
    heads = zoo_transformer.LLAMA["heads"]
    cache = torch.zeros(batch, heads, length, dim // heads)
    return module, (torch.zeros(batch, 1, dim), cache, cache.clone()), {}


def build(spec: str, batch: int = 1, seq: int | None = None):
    """``(module, args, kwargs)`` for ``zoo:NAME`` or ``torchvision:NAME``, on the meta device, in eval mode."""
    import torch

    if batch < 1 or (seq is not None and seq < 1):
        raise UserError(f"batch and sequence length must be at least 1 (got {batch}, {seq})")
    source, _, name = spec.partition(":")
    with torch.device("meta"):
        if source == "torchvision":
            try:
                import torchvision
            except Exception as exc:  # noqa: BLE001 - a torchvision that does not match this torch fails on import
                raise UserError(f"{spec}: torchvision does not import here ({type(exc).__name__}); "
                                f"zoo:{name} is the same network without it") from None
            if not hasattr(torchvision.models, name):
                raise UserError(f"{spec}: torchvision.models has no {name!r}")
            module = getattr(torchvision.models, name)()
            return module.eval(), (torch.zeros(batch, 3, 224, 224),), {}
        if source != "zoo" or name not in ZOO:
            raise UserError(f"unknown model {spec!r}: give an .onnx file, torchvision:NAME, or zoo:NAME with NAME one of "
                            f"{', '.join(ZOO)}")
        if name in VISION:
            module = {"resnet50": _resnet50, "mobilenet_v2": _mobilenet_v2, "efficientnet_b0": _efficientnet_b0}[name]()
            return module.eval(), (torch.zeros(batch, 3, 224, 224),), {}
        if name in IMAGES or name in LLAMA:
            return _modern(name, batch, seq)
        module = _transformers(name).eval()
        length = seq or TEXT[name]
        limit = module.config.max_position_embeddings if name == "bert-base" else module.config.n_positions
        if length > limit:
            raise UserError(f"zoo:{name}: sequence length {length} is past the model's {limit} positions")
        ids = torch.zeros(batch, length, dtype=torch.long)
        return module, (ids,), ({"use_cache": False} if name == "gpt2" else {})
