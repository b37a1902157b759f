"""A generated suite: problem ``i`` of seed ``s`` is a pure function of (s, i, scale), so a seed names
the same files on every machine, and the suite's files need not be kept.

Written out as a KernelBench-shaped folder, ``level1/`` for single ops and ``level2/`` for chains of
2-6, so that everything that reads a KernelBench checkout (``kernels bench --kernelbench DIR``) reads it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from loopwise.kernels.generate.compose import Chain, draw_chain, render

SIGNATURE_CHARS = 48


@dataclass(frozen=True)
class GeneratedProblem:
    """One problem of a suite.

    Attributes:
        name: ``007_s0_layer_norm_relu``: index (from 1), seed, op signature; also the file stem.
        level: 1 for a single op, 2 for a chain.
        source: the problem file's text.
        chain: what was drawn (ops, dtype, input and output types).
    """

    name: str
    level: int
    source: str
    chain: Chain

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.chain.ops)

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(category for _, category in self.chain.ops)


def generate_problem(seed: int, index: int, scale: float = 1.0) -> GeneratedProblem:
    """Problem ``index`` (from 1) of the suite of ``seed``; ``scale`` multiplies every tensor's size."""
    rng = random.Random(f"loopwise-generated:{seed}:{index}")
    chain = draw_chain(rng, scale)
    ops = [name for name, _ in chain.ops]
    signature = re.sub(r"_+", "_", "_".join(ops))[:SIGNATURE_CHARS].rstrip("_")
    name = f"{index:03d}_s{seed}_{signature}"
    title = (f"Generated problem {index} of seed {seed}: {' -> '.join(ops)} "
             f"({chain.dtype}{', misaligned sizes' if chain.odd else ''}).")
    return GeneratedProblem(name, 1 if len(ops) == 1 else 2, render(chain, title), chain)


def generate_suite(count: int, seed: int = 0, scale: float = 1.0) -> list[GeneratedProblem]:
    """Problems 1 to ``count`` of the suite of ``seed``."""
    return [generate_problem(seed, index, scale) for index in range(1, count + 1)]


def write_suite(out: str | Path, count: int, seed: int = 0, scale: float = 1.0) -> list[Path]:
    """Writes the suite as ``out/level1/NAME.py`` and ``out/level2/NAME.py``; returns the paths."""
    paths = []
    for problem in generate_suite(count, seed, scale):
        path = Path(out) / f"level{problem.level}" / f"{problem.name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(problem.source, encoding="utf-8")
        paths.append(path)
    return paths
