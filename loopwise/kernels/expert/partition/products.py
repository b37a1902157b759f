"""The GEMMs of a forward: each call that multiplies an activation by a 2-D model tensor.

nn.Linear, ``F.linear``, ``torch.addmm(bias, x, W)``, ``torch.mm`` / ``torch.matmul`` / ``@`` with
the model's matrix on the right (``x @ W``, ``x @ W.T``) and ``torch.einsum`` whose equation is
such a product (``"ik,kj->ij"``, ``"bik,kj->bij"``, ``"bik,jk->bij"``; :mod:`..contraction`) are
one GEMM each: the activation's leading dimensions are the rows (M), its summed dimension is K,
the matrix's other dimension the columns (N). A batch of model matrices W (B, K, N) times a
(B, M, K) activation (``torch.bmm``, ``torch.matmul``, ``@``) is one batched GEMM, a matrix per
batch entry. A product whose rows come from the matrix (``W @ x``), a matrix-vector product (a 1-D
activation: a GEMM tile would hold one row) and a product of two activations stay in PyTorch."""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

from loopwise.kernels.expert.contraction import NotAProduct, contraction, weight_product
from loopwise.kernels.expert.partition.nodes import dtype_name, float_shape

GEMM_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Site:
    """One GEMM of the forward: ``out = x @ W (+ bias)`` over ``x``'s rows."""

    source: object  # the activation's fx node
    weight: str  # the matrix's attribute path
    bias: str  # the bias's attribute path, "" without one
    weight_kn: bool  # the matrix is stored (K, N) (``x @ W``), not (N, K) as nn.Linear's
    summed_axis: int  # the activation's dimension summed, counted from the end (-1: the last)
    n: int  # the output's columns
    op: str  # linear, mm, matmul, addmm, einsum, bmm
    batch: int = 0  # a batch of matrices (B, K, N) times a (B, M, K) activation: B; 0 for one matrix


def gemm_site(gm, model, node) -> Site | None:
    """The GEMM ``node`` computes (see the module's docstring), or None."""
    site = _module_site(gm, node) if node.op == "call_module" else _function_site(gm, model, node)
    if site is None or not hasattr(site.source, "meta") or float_shape(node) is None or float_shape(site.source) is None:
        return None
    dtype = dtype_name(site.source)
    tensors = [_tensor(model, path) for path in (site.weight, site.bias) if path]
    if dtype not in GEMM_DTYPES or dtype_name(node) != dtype or any(str(t.dtype).removeprefix("torch.") != dtype
                                                                     for t in tensors):
        return None
    if site.batch:  # one matrix per batch entry: the activation is (B, M, K), the batches alike
        shape = float_shape(site.source)
        return site if len(shape) == 3 and shape[0] == site.batch else None
    return site if len(float_shape(site.source)) >= 2 else None


def refusals(gm, model) -> list[str]:
    """Why each einsum of the forward with a model matrix is no GEMM: its equation is not a
    product, or the output is not the input's rows followed by the matrix's columns."""
    import torch

    found = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.einsum and node.args and isinstance(node.args[0], str):
            try:
                c = contraction(node.args[0], len(node.args) - 1)
                for side, arg in (("b", node.args[2]), ("a", node.args[1])):
                    if _matrix(gm, model, arg) is not None:
                        weight_product(c, side)
            except NotAProduct as exc:
                found.append(str(exc))
    return found


def _tensor(model, path: str):
    return functools.reduce(getattr, path.split("."), model)


def _module_site(gm, node) -> Site | None:
    import torch.nn as nn

    sub = gm.get_submodule(node.target)
    if not isinstance(sub, nn.Linear) or len(node.args) != 1 or node.kwargs or not hasattr(node.args[0], "meta"):
        return None
    return Site(node.args[0], f"{node.target}.weight", f"{node.target}.bias" if sub.bias is not None else "",
                False, -1, sub.out_features, "linear")


def _matrix(gm, model, arg, dims: int = 2) -> tuple[str, bool] | None:
    """(attribute path, whether read transposed) where ``arg`` is a 2-D model tensor or its
    transpose (``W.t()``, ``W.T``, ``W.transpose(0, 1)``), else None; with ``dims`` 3, a batch of
    matrices or its matrices transposed (``W.transpose(1, 2)``, ``W.mT``)."""
    import torch

    flipped = False
    swaps = ({0, 1}, {-1, -2}, {0, -1}, {-2, 1}) if dims == 2 else ({1, 2}, {-1, -2}, {1, -1}, {-2, 2})
    if getattr(arg, "op", None) in ("call_method", "call_function") and arg.args and (
            (dims == 2 and arg.op == "call_method" and arg.target == "t" and len(arg.args) == 1)
            or (arg.target is getattr and arg.args[1:] == ("T" if dims == 2 else "mT",))
            or (arg.target in ("transpose", torch.transpose) and set(arg.args[1:]) in swaps)):
        arg, flipped = arg.args[0], True
    if getattr(arg, "op", None) != "get_attr":
        return None
    value = _tensor(model, arg.target)
    return (arg.target, flipped) if isinstance(value, torch.Tensor) and value.dim() == dims else None


def _batched_site(gm, model, node) -> Site | None:
    """``torch.bmm(x, W)``, ``torch.matmul(x, W)`` or ``x @ W`` with the model's batch of matrices W
    (B, K, N) (or its matrices transposed) on the right of a (B, M, K) activation."""
    matrix = _matrix(gm, model, node.args[1], dims=3)
    if matrix is None or _matrix(gm, model, node.args[0], dims=3) is not None:
        return None
    w, flipped = matrix
    shape = tuple(_tensor(model, w).shape)
    return Site(node.args[0], w, "", not flipped, -1, int(shape[1] if flipped else shape[2]),
                getattr(node.target, "__name__", "matmul"), batch=int(shape[0]))


def _function_site(gm, model, node) -> Site | None:
    import torch
    import torch.nn.functional as F

    if node.op != "call_function" or node.kwargs and node.target is not F.linear:
        return None
    args = node.args
    if node.target in (torch.bmm, torch.matmul, operator.matmul) and len(args) == 2 and _matrix(gm, model, args[1], 3):
        return _batched_site(gm, model, node)
    if node.target in (torch.mm, torch.matmul, operator.matmul) and len(args) == 2:
        matrix = _matrix(gm, model, args[1])
        if matrix is None or _matrix(gm, model, args[0]) is not None:
            return None
        w, flipped = matrix
        return Site(args[0], w, "", not flipped, -1, _columns(model, w, not flipped), getattr(node.target, "__name__", "matmul"))
    if node.target is torch.addmm and len(args) == 3 and getattr(args[0], "op", None) == "get_attr":
        matrix = _matrix(gm, model, args[2])
        if matrix is None or _tensor(model, args[0].target).dim() != 1:
            return None
        w, flipped = matrix
        return Site(args[1], w, args[0].target, not flipped, -1, _columns(model, w, not flipped), "addmm")
    if node.target is F.linear:
        return _linear_function(gm, model, node)
    if node.target is torch.einsum and len(args) == 3 and isinstance(args[0], str):
        return _einsum_site(gm, model, node)
    return None


def _linear_function(gm, model, node) -> Site | None:
    """``F.linear(x, W, b)`` with the model's W (and b, if any)."""
    if len(node.args) < 2:
        return None
    x, w = node.args[:2]
    b = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    if set(node.kwargs) - {"bias"} or getattr(w, "op", None) != "get_attr" or b is not None and getattr(b, "op", None) != "get_attr":
        return None
    if _tensor(model, w.target).dim() != 2:
        return None
    return Site(x, w.target, b.target if b is not None else "", False, -1, _columns(model, w.target, False), "linear")


def _einsum_site(gm, model, node) -> Site | None:
    equation, first, second = node.args
    try:
        c = contraction(equation)
    except NotAProduct:
        return None
    for side, arg, other in (("b", second, first), ("a", first, second)):
        matrix = _matrix(gm, model, arg)
        if matrix is None or matrix[1] or _matrix(gm, model, other) is not None:
            continue
        try:
            act, weight_kn = weight_product(c, side)
        except NotAProduct:
            return None
        letters = getattr(c, act)
        return Site(other, matrix[0], "", weight_kn, letters.index(c.summed) - len(letters),
                    _columns(model, matrix[0], weight_kn), "einsum")
    return None


def _columns(model, path: str, weight_kn: bool) -> int:
    shape = tuple(_tensor(model, path).shape)
    return int(shape[1] if weight_kn else shape[0])
