"""The grammar's vocabulary: tensor types, the sizing context, and the contract every op keeps.

An op is a typed rewrite of one tensor: it says which tensor types it accepts, and, given one, draws
its own parameters and returns a :class:`Step`, the source it adds to the problem and the type it
produces. Composition is type checking: an op is only applied to a type it accepts, so shapes flow.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

DTYPES = ("float32", "bfloat16", "float16")
# Largest magnitude a value may reach (a rough bound the ops carry along): fp16 overflows at 65504.
MAG_LIMIT = {"float32": 1e30, "bfloat16": 1e30, "float16": 2e4}
# Elements of a problem's main input at scale 1 (8 MB to 128 MB of fp32).
BASE_ELEMENTS = (1 << 21, 1 << 25)
ODD_SIZES = (3, 7, 33, 127, 1000, 1023, 4097)


@dataclass(frozen=True)
class TensorType:
    """A tensor flowing between ops.

    Attributes:
        shape: its sizes.
        dtype: ``float32``, ``bfloat16`` or ``float16``; ``int64`` for index tensors.
        mag: a rough bound on its values' magnitude, so that no op is applied where it overflows.
        bound: for index tensors, every value is below it.
    """

    shape: tuple[int, ...]
    dtype: str
    mag: float = 4.0
    bound: int = 0

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_index(self) -> bool:
        return self.dtype == "int64"

    def with_(self, shape: tuple[int, ...] | None = None, mag: float | None = None,
              dtype: str | None = None, bound: int | None = None) -> TensorType:
        """The same type with some fields replaced."""
        return TensorType(self.shape if shape is None else tuple(shape), dtype or self.dtype,
                          self.mag if mag is None else mag, self.bound if bound is None else bound)


@dataclass(frozen=True)
class Input:
    """An extra input of the problem (``get_inputs()`` returns the main input first, then these)."""

    name: str
    type: TensorType


@dataclass
class Step:
    """What one op adds to a problem.

    Attributes:
        out: the type it produces.
        forward: lines of ``forward`` that read ``x`` and assign the result to ``x``.
        init: lines of ``__init__`` (parameters, layers, constant buffers).
        inputs: extra inputs it reads by name in ``forward``.
    """

    out: TensorType
    forward: list[str]
    init: list[str] = field(default_factory=list)
    inputs: list[Input] = field(default_factory=list)


class Sizing:
    """Draws sizes for one problem: the element budget, odd or aligned dimensions, a random stream."""

    def __init__(self, rng: random.Random, scale: float, odd: bool, dtype: str) -> None:
        self.rng, self.scale, self.odd, self.dtype = rng, scale, odd, dtype
        low, high = (math.log2(b) for b in BASE_ELEMENTS)
        self.elements = max(64, int(scale * 2 ** rng.uniform(low, high)))

    @property
    def cap(self) -> int:
        """Most elements any intermediate tensor may have."""
        return 4 * self.elements

    def dim(self, about: float, low: int = 1) -> int:
        """A size near ``about`` (at least ``low``): a power of two, or a misaligned one when odd."""
        about = max(float(low), about)
        power = 1 << max(0, round(math.log2(about)))
        if not self.odd or self.rng.random() < 0.4:
            return max(low, power)
        near = [power - 1, power + 1, 2 * power // 3 * 2 + 1] + [s for s in ODD_SIZES if about / 4 <= s <= about * 4]
        return max(low, self.rng.choice([n for n in near if n >= 1] or [power]))

    def shape(self, rank: int, last: float | None = None, lead: tuple[int, ...] = (),
              elements: int | None = None) -> tuple[int, ...]:
        """``lead``, then ``rank`` sizes so that the product is near ``elements`` (default: the
        budget), the last one near ``last`` if given."""
        total = max(1.0, math.log2((elements or self.elements) / math.prod(lead)))
        weights = [self.rng.uniform(0.3, 1.0) for _ in range(rank)]
        if last is not None:
            total -= math.log2(max(1.0, last))
            weights = weights[:-1]
        parts = [total * w / sum(weights) for w in weights] if weights else []
        dims = [self.dim(2 ** p) for p in parts]
        return tuple(lead) + tuple(dims + ([self.dim(last)] if last is not None else []))

    def pick(self, options):
        return self.rng.choice(list(options))


class Op:
    """One operation of the grammar.

    Attributes:
        name: a short unique name, used in problem names.
        category: one of :data:`loopwise.kernels.generate.ops.CATEGORIES`.
        start_rank: the rank of a main input this op is happy to start a problem from.
    """

    name = ""
    category = ""
    start_rank = 2

    def accepts(self, t: TensorType) -> bool:
        """Whether the op can be applied to ``t`` (before its parameters are drawn)."""
        return not t.is_index and t.rank >= 1

    def start(self, sizing: Sizing, dtype: str) -> TensorType:
        """A main input this op accepts, sized by ``sizing``."""
        return TensorType(sizing.shape(self.start_rank), dtype)

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        """The step for input ``t``; ``tag`` makes its names unique. ``None``: no valid draw."""
        raise NotImplementedError


def fits(t: TensorType, sizing: Sizing) -> bool:
    """Whether a produced type is within the size and magnitude limits."""
    return 0 < t.numel <= sizing.cap and t.mag <= MAG_LIMIT.get(t.dtype, 1e30)
