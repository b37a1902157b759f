"""Reductions over any dimension set, scans in every direction, and normalizations."""

from __future__ import annotations

import math

from loopwise.kernels.generate.grammar import MAG_LIMIT, Op, Sizing, Step, TensorType, fits

# Longest scan a cumulative product runs over, so that its factors (1 +- 0.05) cannot overflow.
CUMPROD_MAX = 64


def _dims(t: TensorType, sizing: Sizing, multi: bool) -> tuple[int, ...]:
    """Dimensions to reduce: one (any, including middle ones) or, when ``multi``, a set."""
    dims = [d for d in range(t.rank) if t.shape[d] >= 2] or list(range(t.rank))
    count = sizing.rng.randint(1, min(len(dims), 3)) if multi and sizing.rng.random() < 0.4 else 1
    return tuple(sorted(sizing.rng.sample(dims, count)))


def _reduced(t: TensorType, dims: tuple[int, ...], keep: bool) -> tuple[int, ...]:
    return tuple(1 if d in dims else s for d, s in enumerate(t.shape) if keep or d not in dims)


def _dim_text(dims: tuple[int, ...]) -> str:
    return str(dims[0]) if len(dims) == 1 else str(dims)


# name -> (expression with {d} and {k}, takes a dimension set, output magnitude from (mag, count))
REDUCTIONS = {
    "sum": ("torch.sum(x, dim={d}, keepdim={k})", True, lambda m, n: m * n),
    "mean": ("torch.mean(x, dim={d}, keepdim={k})", True, lambda m, n: m),
    "amax": ("torch.amax(x, dim={d}, keepdim={k})", True, lambda m, n: m),
    "amin": ("torch.amin(x, dim={d}, keepdim={k})", True, lambda m, n: m),
    "logsumexp": ("torch.logsumexp(x, dim={d}, keepdim={k})", True, lambda m, n: m + math.log(n) + 1),
    "var": ("torch.var(x, dim={d}, keepdim={k})", True, lambda m, n: m * m),
    "std": ("torch.std(x, dim={d}, keepdim={k})", True, lambda m, n: m),
    "l2_norm": ("torch.linalg.vector_norm(x, 2, dim={d}, keepdim={k})", True, lambda m, n: m * math.sqrt(n)),
    "argmax": ("torch.argmax(x, dim={d}, keepdim={k})", False, None),
    "argmin": ("torch.argmin(x, dim={d}, keepdim={k})", False, None),
}


class Reduction(Op):
    """A reduction from :data:`REDUCTIONS` over a drawn dimension set, keeping dims or not."""

    category = "reduction"

    def __init__(self, name: str) -> None:
        self.name = name
        self.expr, self.multi, self.mag = REDUCTIONS[name]

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        dims = _dims(t, sizing, self.multi)
        count = math.prod(t.shape[d] for d in dims)
        keep = len(dims) == t.rank or sizing.rng.random() < 0.3
        if self.name in ("var", "std") and (count < 2 or t.mag * t.mag > MAG_LIMIT[t.dtype]):
            return None
        shape = _reduced(t, dims, keep)
        if self.mag is None:
            out = TensorType(shape, "int64", bound=t.shape[dims[0]])
        else:
            out = t.with_(shape=shape, mag=self.mag(t.mag, count))
        code = f"x = {self.expr.format(d=_dim_text(dims), k=keep)}"
        return Step(out, [code]) if fits(out, sizing) or out.is_index else None


class TopK(Op):
    """The ``k`` largest (or smallest) values along one dimension, ``k`` at most 8."""

    name, category = "topk", "reduction"

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        (d,) = _dims(t, sizing, False)
        k = sizing.rng.randint(1, min(8, t.shape[d]))
        largest = sizing.rng.random() < 0.75
        shape = tuple(k if i == d else s for i, s in enumerate(t.shape))
        return Step(t.with_(shape=shape), [f"x = torch.topk(x, {k}, dim={d}, largest={largest}).values"])


# name -> (lines over x and dim {d}, output magnitude from (mag, length))
SCANS = {
    "cumsum": (["x = torch.cumsum(x, dim={d})"], lambda m, n: m * n),
    "cumsum_reverse": (["x = torch.flip(torch.cumsum(torch.flip(x, [{d}]), dim={d}), [{d}])"], lambda m, n: m * n),
    "cumsum_exclusive": (["x = torch.cumsum(x, dim={d}) - x"], lambda m, n: m * n),
    "cumprod": (["x = torch.cumprod(1.0 + 0.05 * torch.tanh(x), dim={d})"], lambda m, n: 1.05 ** n),
    "cumprod_exclusive": (["f = 1.0 + 0.05 * torch.tanh(x)",
                           "f = torch.cat([torch.ones_like(f.narrow({d}, 0, 1)), f.narrow({d}, 0, f.shape[{d}] - 1)], "
                           "dim={d})",
                           "x = torch.cumprod(f, dim={d})"], lambda m, n: 1.05 ** n),
    "logcumsumexp": (["x = torch.logcumsumexp(x, dim={d})"], lambda m, n: m + math.log(n) + 1),
    "cummax": (["x = torch.cummax(x, dim={d}).values"], lambda m, n: m),
}


class Scan(Op):
    """A scan from :data:`SCANS` along one dimension (products only along short ones)."""

    category = "scan"

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines, self.mag = SCANS[name]

    def accepts(self, t: TensorType) -> bool:
        short = not self.name.startswith("cumprod") or any(2 <= s <= CUMPROD_MAX for s in t.shape)
        return super().accepts(t) and short

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        last = sizing.dim(sizing.rng.choice([16, 33, 64])) if self.name.startswith("cumprod") else None
        return TensorType(sizing.shape(2, last=min(last, CUMPROD_MAX) if last else None), dtype)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        longest = CUMPROD_MAX if self.name.startswith("cumprod") else t.numel
        dims = [d for d, s in enumerate(t.shape) if 2 <= s <= longest]
        if not dims:
            return None
        d = sizing.pick(dims)
        out = t.with_(mag=self.mag(t.mag, t.shape[d]))
        return Step(out, [line.format(d=d) for line in self.lines]) if fits(out, sizing) else None


class Softmax(Op):
    """``softmax`` or ``log_softmax`` along any dimension."""

    category = "norm"

    def __init__(self, name: str) -> None:
        self.name = name

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        d = sizing.pick(range(t.rank))
        mag = 1.0 if self.name == "softmax" else 2 * t.mag + math.log(t.shape[d]) + 1
        out = t.with_(mag=mag)
        return Step(out, [f"x = torch.{self.name}(x, dim={d})"]) if fits(out, sizing) else None


class LayerNorm(Op):
    """``nn.LayerNorm`` over the last dimension, or RMSNorm written as ``x * rsqrt(mean(x^2))``."""

    category = "norm"

    def __init__(self, name: str) -> None:
        self.name = name

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        size = t.shape[-1]
        if self.name == "layer_norm":
            return Step(t.with_(mag=8.0), [f"x = self.ln{tag}(x)"], [f"self.ln{tag} = nn.LayerNorm({size})"])
        if t.mag * t.mag > MAG_LIMIT[t.dtype]:
            return None
        init = [f"self.g{tag} = nn.Parameter(1.0 + 0.1 * torch.randn({size}))"]
        code = f"x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g{tag}"
        return Step(t.with_(mag=8.0 * 1.5), [code], init)


class ChannelNorm(Op):
    """``GroupNorm`` or ``BatchNorm`` in eval form over dimension 1 of an (N, C, ...) tensor."""

    category = "norm"
    start_rank = 3

    def __init__(self, name: str) -> None:
        self.name = name

    def accepts(self, t: TensorType) -> bool:
        return super().accepts(t) and t.rank >= (3 if self.name == "group_norm" else 2)

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        return TensorType(sizing.shape(1 + (sizing.rng.random() < 0.5), lead=(sizing.dim(4), sizing.dim(32))), dtype)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        c = t.shape[1]
        if self.name == "group_norm":
            groups = sizing.pick([g for g in (1, 2, 4, 8, 16, 32) if c % g == 0])
            return Step(t.with_(mag=8.0), [f"x = self.gn{tag}(x)"], [f"self.gn{tag} = nn.GroupNorm({groups}, {c})"])
        init = [f"self.register_buffer(\"mean{tag}\", torch.linspace(-0.1, 0.1, {c}))",
                f"self.register_buffer(\"var{tag}\", torch.linspace(0.5, 1.5, {c}))",
                f"self.bn_w{tag} = nn.Parameter(1.0 + 0.1 * torch.randn({c}))",
                f"self.bn_b{tag} = nn.Parameter(0.1 * torch.randn({c}))"]
        code = (f"x = F.batch_norm(x, self.mean{tag}, self.var{tag}, self.bn_w{tag}, self.bn_b{tag}, "
                "training=False, eps=1e-5)")
        out = t.with_(mag=t.mag * 1.5 + 1)
        return Step(out, [code], init) if fits(out, sizing) else None


def reduction_ops() -> list[Op]:
    """Every reduction, scan and normalization of the grammar."""
    return ([Reduction(n) for n in REDUCTIONS] + [TopK()] + [Scan(n) for n in SCANS]
            + [Softmax("softmax"), Softmax("log_softmax"), LayerNorm("layer_norm"), LayerNorm("rms_norm"),
               ChannelNorm("group_norm"), ChannelNorm("batch_norm")])
