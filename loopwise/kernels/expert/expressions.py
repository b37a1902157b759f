"""Translating FX nodes of elementwise work into Triton expressions (one statement per operation),
and the check that a model tensor such an expression reads broadcasts the way the kernel indexes it."""

from __future__ import annotations

import functools
import operator

from loopwise.kernels.expert import elementwise as ew


def check_operand(model, target: str, shape: tuple[int, ...]) -> None:
    """The model's tensor at attribute path ``target`` (a parameter, buffer or plain tensor attribute,
    which ModelNew will hold under the same path) is float32, float16 or bfloat16 (a pass reads it
    upcast to float32) and broadcasts against ``shape`` the one way the kernel indexes it."""
    import torch

    try:
        value = functools.reduce(getattr, target.split("."), model)
    except AttributeError:
        raise ew.Unsupported(f"a tensor made in forward ({target}), not an attribute of the model") from None
    if not isinstance(value, torch.Tensor):
        raise ew.Unsupported(f"model attribute {target!r} is a {type(value).__name__} after tracing, not a tensor "
                             "(does forward reassign it?)")
    if value.dtype not in ew.FLOAT_DTYPES:
        raise ew.Unsupported(f"model tensor {target!r} is {value.dtype}, not float32, float16 or bfloat16")
    if ew.broadcast_run(shape, tuple(value.shape)) is None:
        raise ew.Unsupported(f"model tensor {target!r} of shape {tuple(value.shape)} does not broadcast against "
                             f"the input shape {shape} as one contiguous run of dimensions")


def _arg(value, exprs) -> str:
    return exprs[value.name] if hasattr(value, "name") else ew.literal(value)


def expression(gm, node, exprs) -> tuple[str, str]:
    if node.op == "call_module":
        return _module_expr(gm.get_submodule(node.target), _arg(node.args[0], exprs))
    if node.op not in ("call_function", "call_method"):
        raise ew.Unsupported(f"{node.op} {node.target}")
    target, args, kw = node.target, node.args, node.kwargs
    if target in ew.BINARY and len(args) == 2 and not kw:
        op = getattr(target, "__name__", str(target))
        return ew.BINARY[target].format(a=_arg(args[0], exprs), b=_arg(args[1], exprs)), op
    name = ew.FUNCTIONS.get(target) if node.op == "call_function" else target
    try:
        a = _arg(args[0], exprs)
    except ew.Unsupported:
        if name in ew.UNARY or target in _SPECIALS:
            raise
        # an operation no pass expresses whatever its arguments (einsum's equation): name it
        raise ew.Unsupported(f"operation {getattr(target, '__name__', target)}") from None
    if name == "gelu" and kw.get("approximate", "none") == "tanh":
        return _gelu_tanh(a), "gelu_tanh"
    if name in ew.UNARY:
        return ew.UNARY[name].format(a=a), name
    return _special(target, args, kw, a)


def _special_targets() -> frozenset:
    import torch
    import torch.nn.functional as F

    return frozenset({F.leaky_relu, "leaky_relu", torch.clamp, "clamp", torch.clip, "clip", F.hardtanh,
                      operator.pow, torch.pow, "pow"})


_SPECIALS = _special_targets()  # the operations _special writes


def _special(target, args, kw, a) -> tuple[str, str]:
    import torch
    import torch.nn.functional as F

    if target in (F.leaky_relu, "leaky_relu"):
        return ew.leaky_relu(a, kw.get("negative_slope", args[1] if len(args) > 1 else 0.01)), "leaky_relu"
    if target in (torch.clamp, "clamp", torch.clip, "clip"):
        lo = kw.get("min", args[1] if len(args) > 1 else None)
        hi = kw.get("max", args[2] if len(args) > 2 else None)
        return ew.clamp(a, lo, hi), "clamp"
    if target in (F.hardtanh,):
        return ew.clamp(a, kw.get("min_val", -1.0), kw.get("max_val", 1.0)), "hardtanh"
    if target in (operator.pow, torch.pow, "pow") and len(args) == 2 and not hasattr(args[1], "name"):
        power = args[1]
        if isinstance(power, (int, float)) and not isinstance(power, bool) and float(power) in (2.0, 3.0, 4.0):
            return "(" + " * ".join([a] * int(power)) + ")", "square" if power == 2 else f"pow{int(power)}"
        if power == 0.5:
            return ew.UNARY["sqrt"].format(a=a), "sqrt"
        raise ew.Unsupported(f"pow with exponent {power!r} (2, 3, 4 and 0.5 are expressed)")
    raise ew.Unsupported(f"operation {getattr(target, '__name__', target)}")


def _module_expr(sub, a: str) -> tuple[str, str]:
    import torch.nn as nn

    if isinstance(sub, nn.LeakyReLU):
        return ew.leaky_relu(a, sub.negative_slope), "leaky_relu"
    if isinstance(sub, nn.Hardtanh):
        return ew.clamp(a, sub.min_val, sub.max_val), "hardtanh"
    if isinstance(sub, nn.GELU) and sub.approximate == "tanh":
        return _gelu_tanh(a), "gelu_tanh"
    name = ew.MODULES.get(type(sub))
    if name is None:
        weights = " with parameters" if any(True for _ in sub.parameters()) else ""
        raise ew.Unsupported(f"module {type(sub).__name__}{weights}")
    return ew.UNARY[name].format(a=a), name


def _gelu_tanh(a: str) -> str:
    inner = f"(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))"
    return f"(0.5 * {a} * (1.0 + {ew.UNARY['tanh'].format(a=inner)}))"

