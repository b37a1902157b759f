"""Products with a model matrix (:mod:`.products`) and nn.Conv2d calls as Triton GEMMs, each with the
elementwise work after it as its epilogue."""

from __future__ import annotations

from dataclasses import replace

from loopwise.kernels.expert.fx_graph import zero_padding
from loopwise.kernels.expert.partition.nodes import (dtype_name, float_shape, model_tensors, operand_shapes, read_elsewhere,
                                                     statements)
from loopwise.kernels.expert.partition.products import gemm_site
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
    """The calls that multiply a float32, float16 or bfloat16 activation of two or more dimensions
    by a model matrix of its dtype (nn.Linear, ``x @ W``, a product einsum; :func:`gemm_site`)."""
    return [node for node in gm.graph.nodes if gemm_site(gm, model, node) is not None]


def conv_calls(gm, model) -> list:
    """The nn.Conv2d calls the implicit-GEMM kernel computes (groups 1, zero padding given as
    numbers) on a 4-D float32 input with float32 weights."""
    import torch.nn as nn

    return _modules_on(gm, 4, lambda sub: type(sub) is nn.Conv2d and sub.groups == 1 and zero_padding(sub),
                       ("float32",))


def _conv_shape(sub) -> tuple:
    return (*sub.kernel_size, tuple(sub.stride), tuple(sub.padding), tuple(sub.dilation), sub.in_channels)


def attach_epilogues(gm, model, groups, outputs, anchors):
    """Each product with a model matrix and each Conv2d of ``anchors`` becomes a GEMM; an
    elementwise group whose only activation input is its output (read by nothing else, no other
    group among them) and whose
    tensors hold one value per output column (a product's last dimension, a convolution's
    channels) becomes that GEMM's epilogue.
    Returns the groups left, their outputs, and [(Gemm, (out node, input node))]."""
    import torch.nn as nn

    gemms, taken = [], set()
    for anchor in anchors:
        sub = gm.get_submodule(anchor.target) if anchor.op == "call_module" else None
        if isinstance(sub, nn.Conv2d):
            n, rank, conv, name = sub.out_channels, 4, _conv_shape(sub), "conv2d"
            bare = Gemm(anchor.target, f"{anchor.target}.weight", f"{anchor.target}.bias" if sub.bias is not None else "",
                        (), (), "x0", (name,), conv)
            source = anchor.args[0]
        else:
            site = gemm_site(gm, model, anchor)
            n, rank, conv, name, source = site.n, len(float_shape(anchor)), (), site.op, site.source
            label = anchor.target if site.op == "linear" and anchor.op == "call_module" else f"{site.op} with {site.weight}"
            bare = Gemm(label, site.weight, site.bias, (), (), "x0", (name,), weight_kn=site.weight_kn,
                        summed_axis=site.summed_axis, batched=bool(site.batch))
        # one value per output column: a product's last dimension, a convolution's channels
        per_column = {(1,) * j + (n,) for j in range(rank)} if not conv else {(n,), (n, 1, 1), (1, n, 1, 1)}
        dtype = dtype_name(anchor)
        bare = replace(bare, dtype=dtype, out_dtype=dtype)
        epilogue = None
        for i, (out, xs, ps, cone) in enumerate(outputs):
            # an fp32 GEMM takes an fp32 epilogue; a half-precision one an epilogue that stores its
            # dtype (the cublas move applies it in place on the product)
            if dtype == "float32" and groups[i].upcast or dtype != "float32" and groups[i].out_dtype != dtype:
                continue
            if i in taken or xs != [anchor] or groups[i].prelude or any(u not in cone for u in anchor.users) \
                    or not model_tensors(ps) or read_elsewhere(anchor, outputs, i):
                continue
            if all(s in per_column for s in operand_shapes(model, ps)):
                epilogue = i
                break
        if epilogue is None:
            gemms.append((bare, (anchor, source)))
            continue
        taken.add(epilogue)
        out, _, ps, cone = outputs[epilogue]
        body, ops, expr = statements(gm, cone, {anchor.name: "x0"} | {p.name: f"q{j}" for j, p in enumerate(ps)}, out)
        gemms.append((replace(bare, operands=tuple(p.target for p in ps), body=body, expr=expr, ops=(name, *ops),
                              out_dtype=dtype_name(out)), (out, source)))
    keep = [i for i in range(len(groups)) if i not in taken]
    return [groups[i] for i in keep], [outputs[i] for i in keep], gemms

