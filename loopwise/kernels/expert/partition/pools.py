"""Poolings of a partitioned forward: max and average pooling over the last one, two or three
dimensions of a float tensor, with a fixed window (``F.max_pool2d``, ``nn.AvgPool1d``) or an
adaptive one (``F.adaptive_max_pool2d``, ``nn.AdaptiveAvgPool1d``). Each becomes one Triton part of
the ``graph_norm`` plan (kind ``pool`` of :class:`~.records.Norm`), the elementwise work only it reads
computed as it is read and the work only its output feeds applied before the store, as the row
parts do (:func:`~.norms.norm_passes`)."""

from __future__ import annotations

import math

from loopwise.kernels.expert.fx_graph import op_name
from loopwise.kernels.expert.partition.nodes import float_shape
from loopwise.kernels.expert.partition.records import PoolOp

# each pooling's arguments after the input, in order, as the functional form takes them
_FIXED_MAX = ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
_FIXED_AVG = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
_ADAPTIVE = ("output_size", "return_indices")
_POOLS = {f"{kind}_pool{d}d": (kind, d, False, _FIXED_MAX if kind == "max" else _FIXED_AVG)
          for kind in ("max", "avg") for d in (1, 2, 3)}
_POOLS |= {f"adaptive_{kind}_pool{d}d": (kind, d, True, _ADAPTIVE) for kind in ("max", "avg") for d in (1, 2, 3)}
# the modules' names for the same operations
_MODULES = {f"{kind}Pool{d}d": f"{kind.lower()}_pool{d}d" for kind in ("Max", "Avg") for d in (1, 2, 3)}
_MODULES |= {f"Adaptive{kind}Pool{d}d": f"adaptive_{kind.lower()}_pool{d}d" for kind in ("Max", "Avg") for d in (1, 2, 3)}

# The most window entries each output reads when there are fewer outputs than a pool part's
# FEWEST_PROGRAMS: past it most of the GPU would sit idle while a few programs walk the input.
_MOST_WALKED = 65536


def pool_calls(gm) -> dict:
    """{node: its :class:`PoolOp`} for each pooling of ``gm`` that a pool part computes, in graph
    order, leaving out those whose parts would leave the GPU idle (:func:`pool_refusals` says which)."""
    return {node: pool for node, pool, why in _pools(gm) if not why}


def pool_refusals(gm) -> list[str]:
    """Why each pooling that no part computes for lack of parallel work stays in PyTorch."""
    return [why for _, _, why in _pools(gm) if why]


def _pools(gm):
    """(node, PoolOp, "" or why a part would not pay) for each pooling of ``gm`` a part can compute."""
    for node in gm.graph.nodes:
        found = _pool_op(gm, node)
        if found is not None:
            yield node, found, _idle(found, float_shape(node.args[0]), float_shape(node))


def _idle(pool: PoolOp, shape, out) -> str:
    """Why a part computing ``pool`` from ``shape`` to ``out`` would leave the GPU idle, or ""."""
    lengths = shape[len(shape) - pool.dims:]
    if pool.adaptive:
        window = math.prod(-(-n // o) + 1 for n, o in zip(lengths, out[len(out) - pool.dims:]))
    else:
        window = math.prod(pool.kernel)
    if math.prod(out) >= pool.FEWEST_PROGRAMS or window <= _MOST_WALKED:
        return ""
    return f"{pool.op} of {tuple(shape)} to {tuple(out)}: {math.prod(out)} output(s) would each walk {window} elements"


def _pool_op(gm, node) -> PoolOp | None:
    """What ``node`` computes as a pool part, or None: no pooling, or one with options a part does
    not read (ceil_mode, indices returned, a divisor override), or not of a float tensor with one or
    two dimensions before the pooled ones."""
    if node.op == "call_module":
        sub = gm.get_submodule(node.target)
        name = _MODULES.get(type(sub).__name__)
        if name is None or len(node.args) != 1 or node.kwargs:
            return None
        given = {key: getattr(sub, key) for key in _POOLS[name][3] if hasattr(sub, key)}
    elif node.op in ("call_function", "call_method") and op_name(node) in _POOLS:
        name = op_name(node)
        if node.op == "call_method" or getattr(node.target, "__module__", "") not in (
                "torch.nn.functional", "torch", "torch._C._nn", "torch._C._VariableFunctions", None):
            return None
        given = dict(zip(_POOLS[name][3], node.args[1:])) | dict(node.kwargs)
        if set(given) - set(_POOLS[name][3]):
            return None
    else:
        return None
    kind, dims, adaptive, _ = _POOLS[name]
    source = node.args[0] if node.args else None
    shape = float_shape(source) if hasattr(source, "meta") else None
    if shape is None or len(shape) not in (dims + 1, dims + 2) or float_shape(node) is None:
        return None
    if given.get("ceil_mode") or given.get("return_indices") or given.get("divisor_override") is not None:
        return None
    return _adaptive(name, kind, dims, given) if adaptive else _fixed(name, kind, dims, given)


def per_dim(value, dims: int) -> tuple | None:
    """A pooling argument as one integer per pooled dimension, or None where it is not one."""
    value = tuple(value) if isinstance(value, (tuple, list)) else (value,) * dims
    if len(value) != dims or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return value


def _fixed(name: str, kind: str, dims: int, given: dict) -> PoolOp | None:
    kernel = per_dim(given.get("kernel_size"), dims)
    stride = given.get("stride")
    stride = kernel if stride is None or stride == () or stride == [] else per_dim(stride, dims)
    padding, dilation = per_dim(given.get("padding", 0), dims), per_dim(given.get("dilation", 1), dims)
    if None in (kernel, stride, padding, dilation) or min(kernel + stride + dilation) < 1 or min(padding) < 0:
        return None
    return PoolOp(name, kind, kernel, stride, padding, dilation, include_pad=bool(given.get("count_include_pad", True)))


def _adaptive(name: str, kind: str, dims: int, given: dict) -> PoolOp | None:
    size = given.get("output_size")
    size = tuple(size) if isinstance(size, (tuple, list)) else (size,) * dims
    if len(size) != dims or not all(s is None or isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in size):
        return None
    return PoolOp(name, kind, out_size=size)
