"""The matrix-product detector: a forward that is one product of its two 2-D inputs."""

from __future__ import annotations

from loopwise.kernels.expert.fx_graph import graph_inputs
from loopwise.kernels.expert.pattern import Pattern


_MATMULS = {"matmul", "mm"}


_TRANSPOSES = {"t", "T"}


MATMUL_DTYPES = ("float32", "bfloat16", "float16")


def detect_matmul(gm, model, args) -> Pattern | None:
    """A model whose forward is one matrix product of its two 2-D inputs, both float32, both
    bfloat16 or both float16, either of them possibly transposed (``A @ B``,
    ``torch.matmul(A, B.T)``, ``torch.mm(A.t(), B)``)."""
    import operator

    import torch

    if len(args) != 2 or not all(isinstance(a, torch.Tensor) and a.dim() == 2 for a in args):
        return None
    dtype = str(args[0].dtype).removeprefix("torch.")
    if args[1].dtype != args[0].dtype or dtype not in MATMUL_DTYPES:
        return None
    placeholders = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    transposed: dict = {}
    product = None
    for node in calls:
        name = getattr(node.target, "__name__", str(node.target))
        if node.op == "call_method" and node.target == "t" or (
                node.op == "call_function" and node.target is getattr and node.args[1:] == ("T",)) or (
                node.op == "call_method" and node.target == "transpose" and set(node.args[1:]) in ({0, 1}, {-1, -2})):
            source = node.args[0]
            if source not in placeholders:
                return None
            transposed[node] = source
        elif (node.op == "call_function" and (node.target in (operator.matmul, torch.matmul, torch.mm)
                                               or name in _MATMULS)) and product is None:
            product = node
        else:
            return None
    if product is None or len(product.args) != 2:
        return None
    operands = []
    for arg in product.args:
        if arg in placeholders:
            operands.append((placeholders.index(arg), False))
        elif arg in transposed:
            operands.append((placeholders.index(transposed[arg]), True))
        else:
            return None
    if [i for i, _ in operands] != [0, 1]:
        return None
    (m, k) = args[0].shape[::-1] if operands[0][1] else args[0].shape
    (k2, n) = args[1].shape[::-1] if operands[1][1] else args[1].shape
    if k != k2:
        return None
    return Pattern("matmul", inputs=2, ops=("matmul",),
                   params=(("trans_a", operands[0][1]), ("trans_b", operands[1][1]),
                           ("m", int(m)), ("n", int(n)), ("k", int(k)), ("dtype", dtype)))

