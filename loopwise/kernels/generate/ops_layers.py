"""Matmuls, convolutions, pooling and attention."""

from __future__ import annotations

import math

from loopwise.kernels.generate.grammar import Input, Op, Sizing, Step, TensorType, fits


def _width(sizing: Sizing, about: float) -> int:
    """A feature count near ``about``, shrunk with the problem's scale."""
    return sizing.dim(max(2.0, min(about, math.sqrt(sizing.elements))))


# Most elements of one weight: 512 MiB in fp32, about KernelBench's largest (VGG's first fc layer,
# 102.8M). A flattened activation feeding a Linear would otherwise draw weights of many GiB that a
# judge's host-memory limit refuses before any candidate runs.
WEIGHT_ELEMENTS = 1 << 27


class Linear(Op):
    """Contractions of the last dimension with a weight: ``nn.Linear``, ``mm``, ``bmm``, ``einsum``."""

    category = "matmul"
    RANKS = {"linear": (1, 2, 3, 4), "mm": (2,), "bmm": (3,), "einsum": (2, 3, 4)}
    EINSUM = {2: "ik,kj->ij", 3: "bik,kj->bij", 4: "bhik,hkj->bhij"}

    def __init__(self, name: str) -> None:
        self.name = name
        self.start_rank = max(self.RANKS[name][0], 2)

    def accepts(self, t: TensorType) -> bool:
        return super().accepts(t) and t.rank in self.RANKS[self.name]

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        lead = (sizing.dim(8),) if self.start_rank == 3 else ()
        return TensorType(sizing.shape(self.start_rank - len(lead), last=_width(sizing, 512), lead=lead), dtype)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        k = t.shape[-1]
        n = _width(sizing, sizing.pick((64, 256, 1024, 4096)))
        out = t.with_(shape=t.shape[:-1] + (n,), mag=4 * t.mag)
        batch = t.shape[0] if self.name == "bmm" else t.shape[1] if self.name == "einsum" and t.rank == 4 else 1
        if not fits(out, sizing) or batch * k * n > WEIGHT_ELEMENTS:
            return None
        w, std = f"self.w{tag}", f"{k} ** -0.5"
        if self.name == "linear":
            bias = sizing.rng.random() < 0.7
            return Step(out, [f"x = self.fc{tag}(x)"], [f"self.fc{tag} = nn.Linear({k}, {n}, bias={bias})"])
        if self.name == "mm":
            return Step(out, [f"x = torch.mm(x, {w})"], [f"{w} = nn.Parameter(torch.randn({k}, {n}) * {std})"])
        if self.name == "bmm":
            return Step(out, [f"x = torch.bmm(x, {w})"],
                        [f"{w} = nn.Parameter(torch.randn({t.shape[0]}, {k}, {n}) * {std})"])
        spec = self.EINSUM[t.rank]
        wshape = (k, n) if t.rank < 4 else (t.shape[1], k, n)
        return Step(out, [f"x = torch.einsum(\"{spec}\", x, {w})"],
                    [f"{w} = nn.Parameter(torch.randn{wshape} * {std})"])


class Gram(Op):
    """``x @ x^T`` over the last two dimensions, scaled by ``1/sqrt(K)``."""

    name, category = "matmul_xxt", "matmul"

    def accepts(self, t: TensorType) -> bool:
        return super().accepts(t) and t.rank >= 2

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        m, k = t.shape[-2:]
        out = t.with_(shape=t.shape[:-1] + (m,), mag=t.mag * t.mag * math.sqrt(k))
        code = f"x = torch.matmul(x, x.transpose(-1, -2)) * {k ** -0.5!r}"
        return Step(out, [code]) if fits(out, sizing) else None


def _out_len(size: int, k: int, stride: int, pad: int, transposed: bool = False) -> int:
    if transposed:
        return (size - 1) * stride - 2 * pad + k
    return (size + 2 * pad - k) // stride + 1


class Conv(Op):
    """1-d and 2-d convolutions: dense, depthwise, causal depthwise 1-d, transposed."""

    category = "conv"
    KINDS = {"conv1d": 1, "conv2d": 2, "conv2d_depthwise": 2, "conv1d_causal_depthwise": 1,
             "conv_transpose1d": 1, "conv_transpose2d": 2}

    def __init__(self, name: str) -> None:
        self.name = name
        self.spatial = self.KINDS[name]
        self.start_rank = 2 + self.spatial

    def accepts(self, t: TensorType) -> bool:
        return super().accepts(t) and t.rank == self.start_rank and t.shape[1] <= 1024

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        lead = (sizing.dim(4), _width(sizing, sizing.pick((3, 16, 64))))
        return TensorType(sizing.shape(self.spatial, lead=lead), dtype)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        c, sizes = t.shape[1], t.shape[2:]
        k = sizing.pick((1, 3, 5) if self.spatial == 2 else (2, 3, 4, 7))
        if "depthwise" in self.name:
            return self._depthwise(t, sizing, tag, c, k)
        transposed = "transpose" in self.name
        stride = sizing.pick((1, 2))
        pad = k // 2 if not transposed else 0
        cout = _width(sizing, sizing.pick((8, 32, 64, 128)))
        shape = (t.shape[0], cout) + tuple(_out_len(s, k, stride, pad, transposed) for s in sizes)
        out = t.with_(shape=shape, mag=4 * t.mag)
        if min(shape) < 1 or not fits(out, sizing):
            return None
        layer = {"conv1d": "Conv1d", "conv2d": "Conv2d", "conv_transpose1d": "ConvTranspose1d",
                 "conv_transpose2d": "ConvTranspose2d"}[self.name]
        init = f"self.conv{tag} = nn.{layer}({c}, {cout}, {k}, stride={stride}, padding={pad})"
        return Step(out, [f"x = self.conv{tag}(x)"], [init])

    def _depthwise(self, t: TensorType, sizing: Sizing, tag: str, c: int, k: int) -> Step | None:
        if self.name == "conv1d_causal_depthwise":
            init = [f"self.w{tag} = nn.Parameter(torch.randn({c}, 1, {k}) * {k ** -0.5!r})",
                    f"self.b{tag} = nn.Parameter(0.1 * torch.randn({c}))"]
            code = f"x = F.conv1d(F.pad(x, ({k - 1}, 0)), self.w{tag}, self.b{tag}, groups={c})"
            return Step(t.with_(mag=4 * t.mag), [code], init)
        shape = t.shape[:2] + tuple(_out_len(s, k, 1, k // 2) for s in t.shape[2:])
        out = t.with_(shape=shape, mag=4 * t.mag)
        init = f"self.conv{tag} = nn.Conv2d({c}, {c}, {k}, padding={k // 2}, groups={c})"
        return Step(out, [f"x = self.conv{tag}(x)"], [init]) if fits(out, sizing) else None


class Pool(Op):
    """Max and average pooling (fixed windows) and adaptive pooling, 1-d and 2-d."""

    category = "pool"
    KINDS = {"max_pool1d": 1, "max_pool2d": 2, "avg_pool1d": 1, "avg_pool2d": 2,
             "adaptive_avg_pool1d": 1, "adaptive_avg_pool2d": 2, "adaptive_max_pool2d": 2}

    def __init__(self, name: str) -> None:
        self.name = name
        self.spatial = self.KINDS[name]
        self.start_rank = 2 + self.spatial

    def accepts(self, t: TensorType) -> bool:
        return super().accepts(t) and t.rank == self.start_rank

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        return TensorType(sizing.shape(self.spatial, lead=(sizing.dim(4), _width(sizing, 32))), dtype)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        sizes = t.shape[2:]
        if self.name.startswith("adaptive"):
            target = tuple(max(1, sizing.pick((1, 7, s // 2, s // 3))) for s in sizes)
            arg = target[0] if self.spatial == 1 else target
            return Step(t.with_(shape=t.shape[:2] + target), [f"x = F.{self.name}(x, {arg})"])
        k = sizing.pick((2, 3))
        stride = sizing.pick((1, k))
        if min(sizes) < k:
            return None
        shape = t.shape[:2] + tuple(_out_len(s, k, stride, 0) for s in sizes)
        return Step(t.with_(shape=shape), [f"x = F.{self.name}(x, {k}, stride={stride})"])


class Attention(Op):
    """``scaled_dot_product_attention`` of ``x`` (queries) with key and value inputs of its shape."""

    category = "attention"
    start_rank = 4

    def __init__(self, causal: bool) -> None:
        self.causal = causal
        self.name = "sdpa_causal" if causal else "sdpa"

    def accepts(self, t: TensorType) -> bool:
        return super().accepts(t) and t.rank in (3, 4) and t.shape[-1] <= 256 and t.mag <= 100

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        head = _width(sizing, sizing.pick((32, 64, 128)))
        return TensorType(sizing.shape(2, last=head, lead=(sizing.dim(2), sizing.dim(8))), dtype)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        if t.shape[-2] * t.shape[-2] * math.prod(t.shape[:-2]) > 16 * sizing.cap:
            return None
        k, v = Input(f"k{tag}", t.with_(mag=4.0)), Input(f"v{tag}", t.with_(mag=4.0))
        code = f"x = F.scaled_dot_product_attention(x, k{tag}, v{tag}, is_causal={self.causal})"
        return Step(t.with_(mag=4.0), [code], inputs=[k, v])


def layer_ops() -> list[Op]:
    """Every matmul, convolution, pooling and attention op of the grammar."""
    return ([Linear(n) for n in Linear.RANKS] + [Gram()] + [Conv(n) for n in Conv.KINDS]
            + [Pool(n) for n in Pool.KINDS] + [Attention(False), Attention(True)])
