"""Elementwise ops: unary activations and math, binary ops against a second input or a parameter."""

from __future__ import annotations

from loopwise.kernels.generate.grammar import Input, Op, Sizing, Step, TensorType, fits

# name -> (expression of x, the output's magnitude from the input's)
UNARY = {
    "relu": ("torch.relu(x)", lambda m: m),
    "gelu": ("F.gelu(x)", lambda m: m),
    "gelu_tanh": ("F.gelu(x, approximate=\"tanh\")", lambda m: m),
    "silu": ("F.silu(x)", lambda m: m),
    "sigmoid": ("torch.sigmoid(x)", lambda m: 1.0),
    "tanh": ("torch.tanh(x)", lambda m: 1.0),
    "leaky_relu": ("F.leaky_relu(x, 0.01)", lambda m: m),
    "elu": ("F.elu(x)", lambda m: m),
    "hardswish": ("F.hardswish(x)", lambda m: m),
    "softplus": ("F.softplus(x)", lambda m: m + 1),
    "mish": ("F.mish(x)", lambda m: m),
    "abs": ("torch.abs(x)", lambda m: m),
    "sin": ("torch.sin(x)", lambda m: 1.0),
    "erf": ("torch.erf(x)", lambda m: 1.0),
    "clamp": ("torch.clamp(x, -1.5, 1.5)", lambda m: min(m, 1.5)),
    "log1p_abs": ("torch.log1p(torch.abs(x))", lambda m: m),
    "sqrt_abs": ("torch.sqrt(torch.abs(x))", lambda m: max(1.0, m ** 0.5)),
    "rsqrt_sq1": ("torch.rsqrt(x * x + 1.0)", lambda m: 1.0),
    "softsign": ("F.softsign(x)", lambda m: 1.0),
    "scale_shift": ("x * 0.5 + 0.25", lambda m: m),
}


class Unary(Op):
    """``x = f(x)`` for one entry of :data:`UNARY`."""

    category = "elementwise"

    def __init__(self, name: str) -> None:
        self.name = name
        self.expr, self.mag = UNARY[name]

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        if self.name == "rsqrt_sq1" and t.mag > 100 and t.dtype == "float16":
            return None
        return Step(t.with_(mag=self.mag(t.mag)), [f"x = {self.expr}"])


# name -> (expression of x and y, the output's magnitude from both)
BINARY = {
    "add": ("x + {y}", lambda a, b: a + b),
    "sub": ("x - {y}", lambda a, b: a + b),
    "mul": ("x * {y}", lambda a, b: a * b),
    "maximum": ("torch.maximum(x, {y})", max),
    "div_safe": ("x / (1.0 + torch.abs({y}))", lambda a, b: a),
    "where_pos": ("torch.where({y} > 0, x, {y})", max),
}


class Binary(Op):
    """``x = f(x, y)``: ``y`` an input of ``x``'s shape, a broadcast row input, or a parameter row."""

    category = "elementwise"

    def __init__(self, name: str) -> None:
        self.name = name
        self.expr, self.mag = BINARY[name]

    def apply(self, t: TensorType, sizing: Sizing, tag: str) -> Step | None:
        form = sizing.pick(("full", "row", "param"))
        shape = t.shape if form == "full" else t.shape[-1:]
        other = t.with_(shape=shape, mag=4.0)
        out = t.with_(mag=self.mag(t.mag, other.mag))
        if not fits(out, sizing):
            return None
        if form == "param":
            init = [f"self.w{tag} = nn.Parameter(torch.randn({shape[0]}))"]
            return Step(out, [f"x = {self.expr.format(y=f'self.w{tag}')}"], init)
        name = f"y{tag}"
        return Step(out, [f"x = {self.expr.format(y=name)}"], inputs=[Input(name, other)])


def pointwise_ops() -> list[Op]:
    """Every elementwise op of the grammar."""
    return [Unary(n) for n in UNARY] + [Binary(n) for n in BINARY]
