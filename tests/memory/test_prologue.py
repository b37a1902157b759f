"""A norm's application (x times a per-row statistic and a per-column weight) folded into the
product that reads it: the product applies it to each tile of x it loads, and the normalized x
is never written; where the normalized x has another reader, or the operator is not such an
application, nothing is folded."""

from __future__ import annotations

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise
from loopwise.memory.prologue import fold_prologues

from .verified_plans import verified_plan

M, K, N = 1024, 512, 512


def _t(name: str, *shape: int) -> Tensor:
    return Tensor(name, shape)


def _norm(main: tuple[str, str] = ("m", "k"), rows: int = M, cols: int = K) -> tuple[Operator, Operator]:
    """s[m] = mean_k x[m, k]^2 (a reduction); xn[m, k] = x[m, k] * s[m] * g[k], or with ``main``
    (k, m) the same of another input read transposed, xt[k, m]."""
    stat = Operator("mean", {"m": rows, "k": cols}, (_t("x", rows, cols), _t("s", rows)),
                    reads=(Access("x", ("m", "k")),), writes=(Access("s", ("m",)),))
    x, shape = ("x", (rows, cols)) if main == ("m", "k") else ("xt", (cols, rows))
    apply = Operator("mul", {"m": rows, "k": cols}, (_t(x, *shape), _t("s", rows), _t("g", cols), _t("xn", rows, cols)),
                     reads=(Access(x, main), Access("s", ("m",)), Access("g", ("k",))), writes=(Access("xn", ("m", "k")),))
    return stat, apply


def _projection() -> Operator:
    """y[m, n] = sum_k xn[m, k] * w[n, k]."""
    return Operator("proj", {"m": M, "n": N, "k": K}, (_t("xn", M, K), _t("w", N, K), _t("y", M, N)),
                    reads=(Access("xn", ("m", "k")), Access("w", ("n", "k"))), writes=(Access("y", ("m", "n")),),
                    macs=M * N * K)


def test_the_norm_is_applied_by_the_product_that_reads_it():
    """x 1 MiB, w 512 KiB, y 1 MiB, s 2 KiB, g 1 KiB, at 128 KiB. The statistic reads x and keeps
    s on chip for the product (1 MiB). The product holds g and a chunk of 103 of w's 512 rows
    while the rows of x stream past it, five chunks: it reads x where it read xn, five times, w
    and g once, and stores y. Not folded, the norm would also write xn (1 MiB) and the product
    read it."""
    g = Graph("norm-then-product", (*_norm(), _projection()), frozenset({"w", "g"}))
    p = verified_plan(g, 128 * 1024)
    x, w, y, gamma = 2 * M * K, 2 * N * K, 2 * M * N, 2 * K
    assert p.total_bytes == x + (5 * x + w + y + gamma) == 7_865_344
    assert [grp.operators for grp in p.groups] == [("mean",), ("proj",)]


def test_an_application_read_by_more_than_products_or_not_broadcast_stays():
    """Folded only where every reader is a product, the main input is read where the result is
    written, and something small is applied (an activation alone is not folded)."""
    residual = elementwise("add", (M, K), ("xn", "x"), "z")
    kept = Graph("norm-read-twice", (*_norm(), _projection(), residual), frozenset({"w", "g"}))
    assert fold_prologues(kept) is kept
    transposed = Graph("transposed", (*_norm(("k", "m")), _projection()), frozenset({"w", "g"}))
    assert fold_prologues(transposed) is transposed
    relu = elementwise("relu", (M, K), ("x",), "xn")
    unary = Graph("activation", (relu, _projection()), frozenset({"w"}))
    assert fold_prologues(unary) is unary
    folded = fold_prologues(Graph("norm-then-product", (*_norm(), _projection()), frozenset({"w", "g"})))
    assert [op.name for op in folded.operators] == ["mean", "proj"]
    assert [a.tensor for a in folded.operators[1].reads] == ["x", "s", "g", "w"]


def test_a_pre_norm_residual_around_one_projection_is_a_plan_the_replay_passes():
    """y = x + proj(norm(x)): folded, the projection reads x, and the residual add after it reads x
    too. As the projection's epilogue, the add's tile of x would be held through the reduction
    beside the projection's own tiles of x and w, which the plan did not count; whichever plan is
    kept, the replay passes it within 32 KiB."""
    m, k = 512, 256
    stat, apply = _norm(rows=m, cols=k)
    proj = Operator("proj", {"m": m, "n": k, "k": k}, (_t("xn", m, k), _t("w", k, k), _t("p", m, k)),
                    reads=(Access("xn", ("m", "k")), Access("w", ("n", "k"))), writes=(Access("p", ("m", "n")),),
                    macs=m * k * k)
    residual = elementwise("add", (m, k), ("p", "x"), "y")
    g = Graph("pre-norm-residual", (stat, apply, proj, residual), frozenset({"w", "g"}))
    verified_plan(g, 32 * 1024)


def test_the_plans_compulsory_bound_counts_the_input_its_outputs_need():
    """xn = x * s * g, x and s model inputs, read only by a product over its first 128 rows. The
    product's output needs those 128 rows of x and s alone: the bound the plan reports is the
    folded graph's (the rows the outputs depend on), below the given graph's, whose norm touches
    all 1,024 rows, and the plan moves no less than it."""
    apply = _norm()[1]
    rows = M // 8
    head = Operator("proj", {"m": rows, "n": N, "k": K}, (_t("xn", M, K), _t("w", N, K), _t("y", rows, N)),
                    reads=(Access("xn", ("m", "k")), Access("w", ("n", "k"))), writes=(Access("y", ("m", "n")),),
                    macs=rows * N * K)
    g = Graph("norm-then-head", (apply, head), frozenset({"w", "g"}))
    p = verified_plan(g, 128 * 1024)
    needed = 2 * (rows * K + rows + K + N * K + rows * N)  # x's and s's rows, g, w, y
    assert p.compulsory_bytes == fold_prologues(g).compulsory_bytes() == needed
    assert g.compulsory_bytes() == needed + 2 * (M - rows) * (K + 1)
    assert p.total_bytes >= p.compulsory_bytes


def test_the_plan_json_names_the_operators_folded_into_products():
    """A folded application runs in no group of its own: the plan's JSON names it, so a reader of
    the plan (or the replay's user) can tell a folded operator from a missing one."""
    from types import SimpleNamespace

    from loopwise.memory.plan_json import operator_bounds, plan_json
    from loopwise.memory.targets import load_target

    g = Graph("norm-then-product", (*_norm(), _projection()), frozenset({"w", "g"}))
    p = verified_plan(g, 128 * 1024)
    imported = SimpleNamespace(graph=g, folded=(), unsupported=[])
    data = plan_json("norm", load_target("neuroncore-v2"), p, imported, operator_bounds(g, 128 * 1024), 0.0)
    assert data["operators_folded"] == ["mul"]
    assert sorted(r["operator"] for r in data["operators"]) == ["mean", "proj"]
    unfolded = Graph("norm-read-twice", (*_norm(), _projection(), elementwise("add", (M, K), ("xn", "x"), "z")),
                     frozenset({"w", "g"}))
    q = verified_plan(unfolded, 128 * 1024)
    imported = SimpleNamespace(graph=unfolded, folded=(), unsupported=[])
    assert plan_json("n", load_target("neuroncore-v2"), q, imported, operator_bounds(unfolded, 128 * 1024),
                     0.0)["operators_folded"] == []
