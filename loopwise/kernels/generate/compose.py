"""Chains of 1-6 ops whose shapes flow, type-checked step by step, and their KernelBench source."""

from __future__ import annotations

import random
from dataclasses import dataclass

from loopwise.kernels.generate.grammar import DTYPES, Input, Sizing, Step, TensorType
from loopwise.kernels.generate.ops import by_category

MAX_OPS = 6
# dtype weights: fp32 is the strict track's precision, so it gets half of the problems.
DTYPE_WEIGHTS = (2, 1, 1)
ODD_SHARE = 0.35
_TRIES = 200


@dataclass(frozen=True)
class Chain:
    """One drawn problem: its main input, its steps (op name, category, step) and its output."""

    dtype: str
    odd: bool
    main: TensorType
    ops: tuple[tuple[str, str], ...]
    steps: tuple[Step, ...]

    @property
    def out(self) -> TensorType:
        return self.steps[-1].out


def draw_chain(rng: random.Random, scale: float) -> Chain:
    """A chain of 1 to :data:`MAX_OPS` ops drawn from ``rng`` (categories first, so each is common)."""
    length = rng.randint(1, MAX_OPS)
    dtype = rng.choices(DTYPES, DTYPE_WEIGHTS)[0]
    odd = rng.random() < ODD_SHARE
    sizing = Sizing(rng, scale, odd, dtype)
    for _ in range(_TRIES):
        chain = _try_chain(rng, sizing, length)
        if chain is not None:
            return chain
    raise RuntimeError(f"no chain of {length} ops after {_TRIES} draws")  # the grammar has a hole


def _try_chain(rng: random.Random, sizing: Sizing, length: int) -> Chain | None:
    table = by_category()
    first = rng.choice(table[rng.choice(sorted(table))])
    main = first.start(sizing, sizing.dtype)
    if not first.accepts(main):
        return None
    step = first.apply(main, sizing, "1")
    if step is None:
        return None
    ops, steps = [(first.name, first.category)], [step]
    for position in range(2, length + 1):
        picked = _next_step(rng, sizing, steps[-1].out, str(position))
        if picked is None:
            return None
        ops.append(picked[0])
        steps.append(picked[1])
    if steps[-1].out.is_index and length > 1 and rng.random() < 0.5:
        return None  # keep index-valued outputs (argmax) rarer than float ones
    return Chain(sizing.dtype, sizing.odd, main, tuple(ops), tuple(steps))


def _next_step(rng: random.Random, sizing: Sizing, t: TensorType,
               tag: str) -> tuple[tuple[str, str], Step] | None:
    table = by_category()
    for _ in range(20):
        category = rng.choice(sorted(table))
        ops = [op for op in table[category] if op.accepts(t)]
        if not ops:
            continue
        op = rng.choice(ops)
        step = op.apply(t, sizing, tag)
        if step is None:
            continue
        return (op.name, op.category), step
    return None


def render(chain: Chain, title: str) -> str:
    """The chain as a KernelBench problem file (``Model``, ``get_inputs``, ``get_init_inputs``)."""
    init = [line for step in chain.steps for line in step.init]
    inputs = [Input("x", chain.main)] + [i for step in chain.steps for i in step.inputs]
    lines = [f'"""{title}"""', "import torch", "import torch.nn as nn", "import torch.nn.functional as F", "",
             f"DTYPE = torch.{chain.dtype}", "", "", "class Model(nn.Module):", "    def __init__(self):",
             "        super().__init__()"]
    lines += [f"        {line}" for line in init]
    if init:
        lines.append("        self.to(DTYPE)")
    lines += ["", f"    def forward(self, {', '.join(i.name for i in inputs)}):"]
    lines += [f"        {line}" for step in chain.steps for line in step.forward]
    lines += ["        return x", "", "", "def get_inputs():", "    return ["]
    lines += [f"        {_make_input(i.type)}," for i in inputs]
    lines += ["    ]", "", "", "def get_init_inputs():", "    return []", ""]
    return "\n".join(lines)


def _make_input(t: TensorType) -> str:
    shape = ", ".join(map(str, t.shape))
    if t.is_index:
        return f"torch.randint(0, {t.bound}, ({shape}{',' if t.rank == 1 else ''}))"
    return f"torch.randn({shape}, dtype=DTYPE)"
