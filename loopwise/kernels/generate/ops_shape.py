"""Gathers (embedding lookup, index_select, gather) and reshapes (permute, view, flatten, chunk/cat)."""

from __future__ import annotations

import math

from loopwise.kernels.generate.grammar import Input, Op, Sizing, Step, TensorType, fits

# A prime stride, so that ``arange(n) * STRIDE % size`` spreads indices without a random generator.
STRIDE = 7919


class Embedding(Op):
    """``nn.Embedding`` lookup of an index tensor (the problem's input, or an argmax's output)."""

    name, category = "embedding", "gather"

    def accepts(self, t: TensorType) -> bool:
        return t.is_index and t.bound >= 1

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        vocab = sizing.dim(sizing.pick((1000, 32000, 50257)))
        # tokens for a table row of about 16 to 64 elements each, so the lookup's output fills the budget
        return TensorType(sizing.shape(2, elements=max(4, sizing.elements // 16)), "int64", bound=vocab)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        room = min(sizing.cap / t.numel, 8 * sizing.cap / t.bound)  # the output and the table both fit
        width = sizing.dim(max(2.0, min(sizing.pick((64, 256, 1024)), room)))
        out = TensorType(t.shape + (width,), sizing.dtype)
        if not fits(out, sizing) or t.bound * width > 8 * sizing.cap:
            return None
        return Step(out, [f"x = self.emb{tag}(x)"], [f"self.emb{tag} = nn.Embedding({t.bound}, {width})"])


class IndexSelect(Op):
    """``index_select`` along one dimension with a fixed index buffer (repeats allowed)."""

    name, category = "index_select", "gather"

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        d = sizing.pick(range(t.rank))
        count = max(1, int(t.shape[d] * sizing.pick((0.25, 0.5, 1.0, 1.5))))
        out = t.with_(shape=t.shape[:d] + (count,) + t.shape[d + 1:])
        if not fits(out, sizing):
            return None
        init = [f"self.register_buffer(\"idx{tag}\", torch.arange({count}) * {STRIDE} % {t.shape[d]})"]
        return Step(out, [f"x = torch.index_select(x, {d}, self.idx{tag})"], init)


class Gather(Op):
    """``torch.gather`` along one dimension with an index input."""

    name, category = "gather", "gather"

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        d = sizing.pick(range(t.rank))
        count = max(1, int(t.shape[d] * sizing.pick((0.25, 0.5, 1.0))))
        shape = t.shape[:d] + (count,) + t.shape[d + 1:]
        index = Input(f"idx{tag}", TensorType(shape, "int64", bound=t.shape[d]))
        return Step(t.with_(shape=shape), [f"x = torch.gather(x, {d}, idx{tag})"], inputs=[index])


class Reshape(Op):
    """Layout changes: permute, transpose, flatten, split a dimension, chunk-and-concatenate."""

    category = "reshape"

    def __init__(self, name: str) -> None:
        self.name = name

    def accepts(self, t: TensorType) -> bool:
        rank = {"permute": 3, "transpose": 2, "flatten": 2, "reshape_split": 1, "chunk_cat": 1}[self.name]
        return super().accepts(t) and t.rank >= rank and (self.name != "reshape_split" or t.rank < 5)

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        return TensorType(sizing.shape(3), dtype)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        return getattr(self, "_" + self.name)(t, sizing)

    def _permute(self, t: TensorType, sizing: Sizing) -> Step | None:
        order = list(range(t.rank))
        while order == sorted(order):
            sizing.rng.shuffle(order)
        contiguous = ".contiguous()" if sizing.rng.random() < 0.5 else ""
        shape = tuple(t.shape[i] for i in order)
        return Step(t.with_(shape=shape), [f"x = x.permute({', '.join(map(str, order))}){contiguous}"])

    def _transpose(self, t: TensorType, sizing: Sizing) -> Step | None:
        a, b = sorted(sizing.rng.sample(range(t.rank), 2))
        shape = list(t.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return Step(t.with_(shape=shape), [f"x = x.transpose({a}, {b}).contiguous()"])

    def _flatten(self, t: TensorType, sizing: Sizing) -> Step | None:
        a = sizing.rng.randrange(t.rank - 1)
        b = sizing.rng.randrange(a + 1, t.rank)
        shape = t.shape[:a] + (math.prod(t.shape[a:b + 1]),) + t.shape[b + 1:]
        return Step(t.with_(shape=shape), [f"x = torch.flatten(x, {a}, {b})"])

    def _reshape_split(self, t: TensorType, sizing: Sizing) -> Step | None:
        options = [(d, f) for d, s in enumerate(t.shape) for f in (2, 3, 4, 8) if s % f == 0 and s > f]
        if not options:
            return None
        d, f = sizing.pick(options)
        shape = t.shape[:d] + (f, t.shape[d] // f) + t.shape[d + 1:]
        return Step(t.with_(shape=shape), [f"x = x.reshape({', '.join(map(str, shape))})"])

    def _chunk_cat(self, t: TensorType, sizing: Sizing) -> Step | None:
        dims = [d for d, s in enumerate(t.shape) if s >= 2]
        if not dims:
            return None
        d = sizing.pick(dims)
        lines = [f"a, b = x.chunk(2, dim={d})", f"x = torch.cat([b, a], dim={d})"]
        return Step(t, lines)


class Glu(Op):
    """``F.glu``: one half of a dimension gated by the sigmoid of the other."""

    name, category = "glu", "elementwise"

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        dims = [d for d, s in enumerate(t.shape) if s % 2 == 0]
        if not dims:
            return None
        d = sizing.pick(dims)
        shape = t.shape[:d] + (t.shape[d] // 2,) + t.shape[d + 1:]
        return Step(t.with_(shape=shape), [f"x = F.glu(x, dim={d})"])


def shape_ops() -> list[Op]:
    """Every gather and reshape op of the grammar."""
    return ([Embedding(), IndexSelect(), Gather()] + [Glu()]
            + [Reshape(n) for n in ("permute", "transpose", "flatten", "reshape_split", "chunk_cat")])
