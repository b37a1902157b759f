"""Emits a standalone ``ModelNew`` source from a captured pattern and a set of moves."""

from __future__ import annotations

import keyword
from importlib import resources

from loopwise.kernels.expert.capture import Pattern, capture

DEFAULT_MOVES = {"elementwise": {"block": 1024, "warps": 4}, "row_softmax": {"block": 2048, "warps": 8},
                 "layernorm": {"block": 1024, "warps": 4, "chunk": 16384},
                 "matmul": {"block": 128, "warps": 8, "chunk": 32}, "linear": {"block": 128, "warps": 8, "chunk": 32},
                 "reduce": {"block": 64, "warps": 4, "chunk": 32}, "scan": {"block": 1024, "warps": 4},
                 "norm": {"block": 64, "warps": 4, "chunk": 32}, "pool": {"block": 256, "warps": 4},
                 "conv2d": {"block": 64, "warps": 4, "chunk": 32}}
TEMPLATES = {"elementwise": "elementwise.py.j2", "row_softmax": "row_softmax.py.j2", "layernorm": "layernorm.py.j2",
             "matmul": "matmul.py.j2", "linear": "linear.py.j2", "reduce": "reduce_dim.py.j2",
             "scan": "scan_rows.py.j2", "norm": "norm_dim.py.j2",
             "pool": "pool.py.j2", "conv2d": "conv2d.py.j2"}


def render(pattern: Pattern, moves: dict | None = None, precision: str = "fp32") -> str:
    """The source for ``pattern`` with ``moves`` (block size, warps) over the defaults. Matrix
    products run on the tensor cores through tf32x3 under the ``fp32`` policy (fp32-accurate) and
    as plain TF32 under ``relaxed``."""
    import jinja2

    params = {**DEFAULT_MOVES[pattern.kind], **(moves or {})}
    if pattern.kind == "layernorm":
        # A chunk is a whole number of blocks.
        params["chunk"] = max(params["block"], params["chunk"] // params["block"] * params["block"])
    text = (resources.files("loopwise.kernels.expert") / "templates" / TEMPLATES[pattern.kind]).read_text()
    note = f"{pattern.kind}: block {params['block']}, {params['warps']} warps" + (
        f", chunk {params['chunk']}" if "chunk" in params else "")
    template = jinja2.Template(text, keep_trailing_newline=True)
    return template.render(count=pattern.inputs, expr=pattern.expr, body=pattern.body, ops=", ".join(pattern.ops),
                           note=note, operands=pattern.operands, init=pattern.init, constants=pattern.constants,
                           prologue=pattern.prologue, scalars=pattern.scalars,
                           dot_precision="tf32x3" if precision == "fp32" else "tf32",
                           first=min(set(range(max(pattern.inputs, 1))) - set(pattern.scalars), default=0),
                           attribute=attribute, **dict(pattern.params), **params)


def attribute(path: str) -> str:
    """``self.<path>`` as Python source; parts that are not identifiers (``layers.0.weight`` from an
    nn.ModuleList) go through getattr, which nn.Module resolves the same way fx named them."""
    expr = "self"
    for part in path.split("."):
        expr = f"{expr}.{part}" if part.isidentifier() and not keyword.iskeyword(part) else f"getattr({expr}, {part!r})"
    return expr


def generate(problem, moves: dict | None = None, precision: str = "fp32") -> tuple[str | None, Pattern]:
    """(source or None, the captured pattern); None when no template covers the problem."""
    pattern = capture(problem)
    if pattern.kind not in TEMPLATES:
        return None, pattern
    return render(pattern, moves, precision), pattern
