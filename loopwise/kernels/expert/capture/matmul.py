"""The matrix-product detectors: a forward that is one product of two matrices (or of a tensor's
rows by a matrix), or one batch of products."""

from __future__ import annotations

from loopwise.kernels.expert.fx_graph import graph_inputs
from loopwise.kernels.expert.pattern import Pattern


_MATMULS = {"matmul", "mm"}


_TRANSPOSES = {"t", "T"}


MATMUL_DTYPES = ("float32", "bfloat16", "float16")


def detect_matmul(gm, model, args) -> Pattern | None:
    """A model whose forward is one matrix product of its two 2-D inputs, both float32, both
    bfloat16 or both float16, either of them possibly transposed (``A @ B``,
    ``torch.matmul(A, B.T)``, ``torch.mm(A.t(), B)``), possibly kept to one side of a diagonal
    (``torch.triu(A @ B)``, ``(A @ B).tril(-1)``: params ``triangle`` upper or lower and ``diagonal``).

    The first input may have more than two dimensions where the second is a matrix, A is read as
    it is and no triangle is kept (``A @ B``, ``torch.matmul(A, B.T)``,
    ``torch.einsum("bijl,lk->bijk", A, B)``): a product of A's rows, each its last dimension long,
    by B, as torch.matmul computes it. A's leading dimensions become M rows (param ``lead``: their
    extents; ``m`` their product), so the 2-D product's variants apply to it, not a batched one."""
    import math
    import operator

    import torch

    if len(args) != 2 or not all(isinstance(a, torch.Tensor) for a in args) or args[0].dim() < 2 or args[1].dim() != 2:
        return None
    lead = tuple(int(extent) for extent in args[0].shape[:-1]) if args[0].dim() > 2 else None
    dtype = str(args[0].dtype).removeprefix("torch.")
    if args[1].dtype != args[0].dtype or dtype not in MATMUL_DTYPES:
        return None
    placeholders = graph_inputs(gm)
    calls = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    transposed: dict = {}
    product = triangle = None
    for node in calls:
        name = getattr(node.target, "__name__", str(node.target))
        if node.op == "call_method" and node.target == "t" or (
                node.op == "call_function" and node.target is getattr and node.args[1:] == ("T",)) or (
                node.op == "call_method" and node.target == "transpose" and set(node.args[1:]) in ({0, 1}, {-1, -2})):
            source = node.args[0]
            if source not in placeholders:
                return None
            transposed[node] = source
        elif (node.op == "call_function" and (node.target in (operator.matmul, torch.matmul, torch.mm, torch.einsum)
                                               or name in _MATMULS)) and product is None:
            product = node
        elif product is not None and triangle is None and _triangle(node, product) is not None:
            triangle = node
        else:
            return None
    sides = _product_sides(product, transposed) if product is not None else None
    if sides is None or not all(source in placeholders for source, _ in sides):
        return None
    operands = [(placeholders.index(source), flipped) for source, flipped in sides]
    if [i for i, _ in operands] != [0, 1]:
        return None
    if lead is not None and (operands[0][1] or triangle is not None):
        return None  # rows that are not A's own, or a triangle of each trailing matrix: a batched product's
    if lead is not None:
        (m, k) = (math.prod(lead), args[0].shape[-1])
    else:
        (m, k) = args[0].shape[::-1] if operands[0][1] else args[0].shape
    (k2, n) = args[1].shape[::-1] if operands[1][1] else args[1].shape
    if k != k2:
        return None
    kept = (("triangle", _triangle(triangle, product)[0]), ("diagonal", _triangle(triangle, product)[1])) if triangle else ()
    return Pattern("matmul", inputs=2, ops=("matmul", *([_triangle(triangle, product)[2]] if triangle else [])),
                   params=(("trans_a", operands[0][1]), ("trans_b", operands[1][1]),
                           ("m", int(m)), ("n", int(n)), ("k", int(k)), ("dtype", dtype), *kept,
                           *((("lead", lead),) if lead is not None else ())))


def _triangle(node, product):
    """("upper" or "lower", the diagonal, the call's name) where ``node`` is ``triu`` / ``tril`` of
    ``product`` (a function or a method, the diagonal a number given or 0), else None."""
    import torch

    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if name not in ("triu", "tril") or not node.args or node.args[0] is not product:
        return None
    if node.op == "call_function" and node.target not in (torch.triu, torch.tril):
        return None
    extra = dict(zip(("diagonal",), node.args[1:])) | dict(node.kwargs)
    diagonal = extra.get("diagonal", 0)
    if len(node.args) > 2 or set(extra) - {"diagonal"} or not isinstance(diagonal, int) or isinstance(diagonal, bool):
        return None
    return ("upper" if name == "triu" else "lower"), diagonal, name



_BATCH_PROGRAMS = 65535  # the grid's second axis, one program row per batch entry


def detect_batched_matmul(gm, model, args) -> Pattern | None:
    """A forward that is one batched matrix product (``torch.bmm``, ``@`` or ``torch.matmul`` with a
    3-D or higher operand) of its inputs or the model's own tensors (``torch.bmm(x, self.w)``), either
    operand's last two dimensions possibly swapped (``.transpose(-1, -2)``, ``.mT``). Both operands
    carry the same batch dimensions, or one of them is 2-D and shared by every batch entry
    (``x @ W`` for a batch of ``x``); batch dimensions that broadcast against each other otherwise
    are not covered. Plain 2-D products of two inputs are :func:`detect_matmul`'s, and so are
    products of the first input's rows by the second, a matrix (``A @ B`` for a batch of A read as
    it is: one product of M rows)."""
    import functools
    import operator

    import torch

    if not 1 <= len(args) <= 2 or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    placeholders = graph_inputs(gm)
    sources: dict = {p: (f"x{i}", args[i]) for i, p in enumerate(placeholders)}  # node -> (name, tensor)
    operands: list[str] = []
    transposed: dict = {}
    product = None
    for node in (n for n in gm.graph.nodes if n.op not in ("placeholder", "output")):
        name = getattr(node.target, "__name__", str(node.target))
        if node.op == "get_attr":
            value = functools.reduce(getattr, node.target.split("."), model)
            if not isinstance(value, torch.Tensor):
                return None
            operands.append(node.target)
            sources[node] = (f"p{len(operands) - 1}", value)
        elif node.args[:1] and node.args[0] in sources and (
                (node.op == "call_method" and node.target == "transpose" and _last_two(node.args[1:], sources[node.args[0]][1]))
                or (node.op == "call_function" and node.target is getattr and node.args[1:] == ("mT",))
                or (node.op == "call_function" and node.target is torch.transpose
                    and _last_two(node.args[1:], sources[node.args[0]][1]))):
            transposed[node] = node.args[0]
        elif (node.op == "call_function" and (node.target in (operator.matmul, torch.matmul, torch.bmm, torch.einsum)
                                               or name in ("matmul", "bmm"))) and product is None:
            product = node
        else:
            return None
    found = _product_sides(product, transposed) if product is not None else None
    if found is None or not all(source in sources for source, _ in found):
        return None
    sides = [(sources[source], flipped) for source, flipped in found]
    (a_name, a), trans_a = sides[0]
    (b_name, b), trans_b = sides[1]
    if {a_name, b_name} & {f"x{i}" for i in range(len(args))} != {f"x{i}" for i in range(len(args))}:
        return None  # an input the product does not read
    if min(a.dim(), b.dim()) < 2 or max(a.dim(), b.dim()) < 3 or a.dtype != b.dtype:
        return None
    dtype = str(a.dtype).removeprefix("torch.")
    if dtype not in MATMUL_DTYPES:
        return None
    (m, k) = tuple(a.shape[-2:])[::-1] if trans_a else tuple(a.shape[-2:])
    (k2, n) = tuple(b.shape[-2:])[::-1] if trans_b else tuple(b.shape[-2:])
    batch_a, batch_b = tuple(a.shape[:-2]), tuple(b.shape[:-2])
    if k != k2 or (batch_a and batch_b and batch_a != batch_b):
        return None
    batch = 1
    for extent in batch_a or batch_b:
        batch *= int(extent)
    if batch > _BATCH_PROGRAMS:
        return None
    return Pattern("bmm", inputs=len(args), ops=("matmul",), operands=tuple(operands),
                   params=(("a", a_name), ("b", b_name), ("trans_a", trans_a), ("trans_b", trans_b), ("batch", batch),
                           ("shared_a", not batch_a), ("shared_b", not batch_b),
                           ("m", int(m)), ("n", int(n)), ("k", int(k)), ("dtype", dtype)))


def _product_sides(product, transposed: dict) -> list | None:
    """The product's two operands in order, each (the node it reads, whether it reads it with its
    last two dimensions swapped): a matmul's arguments through the transposes in ``transposed``, or
    an einsum's operands where its equation is a (batched) matrix product (:func:`einsum_sides`)."""
    import torch

    if product.target is torch.einsum:
        if len(product.args) != 3 or not isinstance(product.args[0], str) or product.kwargs:
            return None
        found = einsum_sides(product.args[0])
        return None if found is None else [(product.args[1 + i], flipped) for i, flipped in found]
    if len(product.args) != 2:
        return None
    return [(transposed.get(arg, arg), arg in transposed) for arg in product.args]


def einsum_sides(equation: str) -> list[tuple[int, bool]] | None:
    """How the einsum ``equation`` over two tensors is one (batched) matrix product: [(operand, whether
    its last two dimensions are read swapped)] for the product's left and right factors, or None.
    The batch letters must lead both operands and the output in one order, then one row, one
    column and the summed letter (``"bhqd,bhkd->bhqk"``: the second operand transposed;
    ``"ij,jk->ki"``: the factors swapped), or the first operand's letters in the output's order with
    the summed one last and the second a matrix (``"bijl,lk->bijk"``, ``A @ B`` for a batch of A)."""
    from loopwise.kernels.expert.contraction import NotAProduct, contraction

    try:
        c = contraction(equation)
    except NotAProduct:
        return None
    nb = len(c.batch)
    if not c.batch and len(c.rows) > 1 and len(c.cols) == 1 and len(c.b) == 2 and c.a == c.rows + c.summed \
            and c.out == c.rows + c.cols:  # "bijl,lk->bijk": the first operand's leading letters batch a shared matrix
        return [(0, False), (1, c.b != c.summed + c.cols)]
    if len(c.rows) != 1 or len(c.cols) != 1 or not c.a[:nb] == c.b[:nb] == c.out[:nb] == c.batch:
        return None
    terms = {0: c.a[nb:], 1: c.b[nb:]}
    row, col = c.out[nb:]
    left = 0 if row in terms[0] else 1
    return [(left, terms[left] != row + c.summed), (1 - left, terms[1 - left] != c.summed + col)]


def _last_two(dims, tensor) -> bool:
    """Whether a transpose's two dimensions are ``tensor``'s last two."""
    if len(dims) != 2 or not all(isinstance(d, int) for d in dims):
        return False
    return {d % tensor.dim() for d in dims} == {tensor.dim() - 2, tensor.dim() - 1}
