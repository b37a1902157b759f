"""nn.Linear and nn.Conv2d calls as Triton GEMMs, each with the elementwise work after it as its epilogue."""

from __future__ import annotations

from loopwise.kernels.expert.fx_graph import zero_padding
from loopwise.kernels.expert.partition.nodes import dtype_name, float_shape, operand_shapes, statements
from loopwise.kernels.expert.partition.records import Gemm


def _modules_on(gm, ndim: int, accepts, dtypes: tuple[str, ...]) -> list:
    """The calls of modules ``accepts`` takes, on one ``ndim``-D input (no other argument) of one of
    ``dtypes``, with weights (and bias) and output of that dtype."""
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_module" or not accepts(gm.get_submodule(node.target)):
            continue
        sub = gm.get_submodule(node.target)
        src = node.args[0] if node.args else None
        shape = float_shape(src) if hasattr(src, "meta") else None
        if shape is None or len(shape) != ndim or len(node.args) != 1 or node.kwargs:
            continue
        dtype = dtype_name(src)
        if dtype not in dtypes or float_shape(node) is None or dtype_name(node) != dtype:
            continue
        if any(str(t.dtype).removeprefix("torch.") != dtype for t in (sub.weight, sub.bias) if t is not None):
            continue
        found.append(node)
    return found


def linear_calls(gm, model) -> list:
    """The nn.Linear calls on a 2-D float32, float16 or bfloat16 input with weights of its dtype."""
    import torch.nn as nn

    return _modules_on(gm, 2, lambda sub: isinstance(sub, nn.Linear), ("float32", "float16", "bfloat16"))


def conv_calls(gm, model) -> list:
    """The nn.Conv2d calls the implicit-GEMM kernel computes (groups 1, zero padding given as
    numbers) on a 4-D float32 input with float32 weights."""
    import torch.nn as nn

    return _modules_on(gm, 4, lambda sub: type(sub) is nn.Conv2d and sub.groups == 1 and zero_padding(sub),
                       ("float32",))


def _conv_shape(sub) -> tuple:
    return (*sub.kernel_size, tuple(sub.stride), tuple(sub.padding), tuple(sub.dilation), sub.in_channels)


def attach_epilogues(gm, model, groups, outputs, anchors):
    """Each Linear and Conv2d of ``anchors`` becomes a GEMM; an elementwise group whose only
    activation input is its output (read by nothing else) and whose tensors hold one value per
    output column (a Linear's features, a convolution's channels) becomes that GEMM's epilogue.
    Returns the groups left, their outputs, and [(Gemm, (out node, input node))]."""
    import torch.nn as nn

    gemms, taken = [], set()
    for anchor in anchors:
        sub = gm.get_submodule(anchor.target)
        linear = isinstance(sub, nn.Linear)
        n = sub.out_features if linear else sub.out_channels
        per_column = ((n,), (1, n)) if linear else ((n,), (n, 1, 1), (1, n, 1, 1))
        conv = () if linear else _conv_shape(sub)
        name = "linear" if linear else "conv2d"
        dtype = dtype_name(anchor)
        epilogue = None
        for i, (out, xs, ps, cone) in enumerate(outputs):
            # an fp32 GEMM takes an fp32 epilogue; a half-precision one an epilogue that stores its
            # dtype (the cublas move applies it in place on the product)
            if dtype == "float32" and groups[i].upcast or dtype != "float32" and groups[i].out_dtype != dtype:
                continue
            if i in taken or xs != [anchor] or groups[i].prelude or any(u not in cone for u in anchor.users):
                continue
            if all(s in per_column for s in operand_shapes(model, ps)):
                epilogue = i
                break
        if epilogue is None:
            gemms.append((Gemm(anchor.target, sub.bias is not None, (), (), "x0", (name,), conv, dtype, dtype),
                          (anchor, anchor.args[0])))
            continue
        taken.add(epilogue)
        out, _, ps, cone = outputs[epilogue]
        body, ops, expr = statements(gm, cone, {anchor.name: "x0"} | {p.name: f"q{j}" for j, p in enumerate(ps)}, out)
        gemms.append((Gemm(anchor.target, sub.bias is not None, tuple(p.target for p in ps), body, expr,
                           (name, *ops), conv, dtype, dtype_name(out)), (out, anchor.args[0])))
    keep = [i for i in range(len(groups)) if i not in taken]
    return [groups[i] for i in keep], [outputs[i] for i in keep], gemms

