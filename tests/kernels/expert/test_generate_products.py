"""Products with a model matrix as GEMMs of the partitioned plan: ``torch.mm``, ``@``, ``torch.matmul``,
``F.linear``, ``torch.addmm`` and product einsums (plain, batched over the input's leading
dimensions, the matrix transposed or on the left of the equation, the summed dimension not last)
are the ``graph_linear`` plan's GEMMs, with the elementwise work after them as their epilogue;
judged correct in Triton's CPU interpreter. Einsums that are not a product are refused with their
equation named."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.contraction import NotAProduct, contraction
from loopwise.kernels.expert.generate import variants
from loopwise.kernels.expert.partition import plan
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct  # noqa: E402 - tests/kernels/expert on sys.path

MOVES = {"template": "graph_linear", "tile": 16, "chunk": 16, "gemm_warps": 4, "block": 64}

# (name, __init__ lines, forward lines, inputs, the GEMM's operations); sizes ragged against the 16-wide tiles
PRODUCTS = [
    ("mm", "self.w = nn.Parameter(torch.randn(20, 24) * 0.2)", "x = torch.mm(x, self.w)\nx = torch.relu(x) * 2.0",
     "torch.randn(37, 20, dtype=DTYPE)", ("mm", "relu", "mul")),
    ("matmul_t", "self.w = nn.Parameter(torch.randn(24, 20) * 0.2)\nself.s = nn.Parameter(torch.randn(24))",
     "x = x @ self.w.T\nx = torch.tanh(x + self.s)", "torch.randn(3, 11, 20, dtype=DTYPE)", ("matmul", "add", "tanh")),
    ("einsum_batched", "self.w = nn.Parameter(torch.randn(20, 24) * 0.2)",
     'x = torch.einsum("bik,kj->bij", x, self.w)\nx = F.gelu(x)', "torch.randn(3, 13, 20, dtype=DTYPE)", ("einsum", "gelu")),
    ("einsum_nk", "self.w = nn.Parameter(torch.randn(24, 20) * 0.2)",
     'x = torch.einsum("ij,kj->ik", x, self.w)', "torch.randn(29, 20, dtype=DTYPE)", ("einsum",)),
    ("einsum_left_summed_middle", "self.w = nn.Parameter(torch.randn(20, 24) * 0.2)",
     'x = torch.einsum("kn,bkm->bmn", self.w, x)\nx = x - 0.5', "torch.randn(2, 20, 9, dtype=DTYPE)", ("einsum", "sub")),
    ("addmm", "self.w = nn.Parameter(torch.randn(20, 24) * 0.2)\nself.b = nn.Parameter(torch.randn(24))",
     "x = torch.addmm(self.b, x, self.w)\nx = torch.sigmoid(x)", "torch.randn(18, 20, dtype=DTYPE)", ("addmm", "sigmoid")),
    ("f_linear", "self.w = nn.Parameter(torch.randn(24, 20) * 0.2)\nself.b = nn.Parameter(torch.randn(24))",
     "x = F.linear(x, self.w, self.b)\nx = torch.abs(x)", "torch.randn(18, 20, dtype=DTYPE)", ("linear", "abs")),
]
# a batch of model matrices: one GEMM a batch entry (judged in the slow tier)
BATCHED = [
    ("bmm", "self.v = nn.Parameter(torch.randn(3, 20, 24) * 0.2)\nself.s = nn.Parameter(torch.randn(24))",
     "x = torch.bmm(x, self.v)\nx = torch.relu(x + self.s)", "torch.randn(3, 37, 20, dtype=DTYPE)", ("bmm", "add", "relu")),
    ("matmul_batched_t", "self.v = nn.Parameter(torch.randn(2, 24, 20) * 0.2)",
     "x = x @ self.v.transpose(1, 2)\nx = x * 2.0", "torch.randn(2, 13, 20, dtype=DTYPE)", ("matmul", "mul")),
]


def _gemms(path) -> list:
    pattern = capture(load_problem(str(path)))
    assert "graph_linear" in variants(pattern), pattern.reason
    return plan(pattern, "graph_linear")


@pytest.mark.parametrize("dtype", ["float32", pytest.param("float16", marks=pytest.mark.slow)])  # half: slow tier
@pytest.mark.parametrize("case", PRODUCTS, ids=[c[0] for c in PRODUCTS])
def test_a_product_with_a_model_matrix_is_a_gemm_with_its_epilogue(tmp_path, monkeypatch, case, dtype):
    """Each form is one GEMM (nothing left in PyTorch) whose epilogue is the work after it, and the
    candidate is judged correct (fp32 strict, fp16 with its own tolerance)."""
    name, init, forward, inputs, ops = case
    path = _problem(tmp_path, name, init + "\nself.to(DTYPE)", forward, inputs, dtype)
    chosen = _gemms(path)
    assert [g.ops for g in chosen["gemms"]] == [ops] and chosen["pytorch"] == () and chosen["groups"] == ()
    judged_correct(path, MOVES, tmp_path, monkeypatch)


def test_the_matrix_read_in_place_is_not_copied_and_the_rows_keep_their_shape(tmp_path):
    """``x @ W`` reads W (K, N) through its strides (a transposed view, no copy), the einsum with its
    summed dimension in the middle moves it last, and the output takes the input's leading shape."""
    from loopwise.kernels.expert.generate import generate

    name, init, forward, inputs, _ = PRODUCTS[4]
    source, _ = generate(load_problem(str(_problem(tmp_path, name, init, forward, inputs))), MOVES)
    assert "w = w.to(x0.device).transpose(-1, -2)" in source and "x0 = x0.movedim(-2, -1)" in source
    assert "return out.reshape(*rows, N)" in source


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) for c in BATCHED], ids=[c[0] for c in BATCHED])
def test_a_product_with_a_batch_of_model_matrices_is_a_batched_gemm_with_its_epilogue(tmp_path, monkeypatch, case):
    name, init, forward, inputs, ops = case
    for dtype in ("float32", "float16"):
        path = _problem(tmp_path, name, init + "\nself.to(DTYPE)", forward, inputs, dtype)
        chosen = _gemms(path)
        assert [(g.ops, g.batched) for g in chosen["gemms"]] == [(ops, True)] and chosen["pytorch"] == ()
        judged_correct(path, MOVES, tmp_path, monkeypatch)


def test_a_batch_of_model_matrices_is_one_batched_gemm(tmp_path):
    name, init, forward, inputs, ops = BATCHED[0]
    chosen = _gemms(_problem(tmp_path, name, init, forward, inputs))
    assert [(g.ops, g.batched, g.weight_kn) for g in chosen["gemms"]] == [(ops, True, True)] and chosen["pytorch"] == ()


def test_a_product_that_stays_in_pytorch_is_left_there(tmp_path):
    """``W @ x`` (the rows come from the matrix), a batch of matrices whose batch is not the
    input's, and a product of two activations are no GEMM of this plan: the only fusible work is
    the elementwise chain after them."""
    init = "self.w = nn.Parameter(torch.randn(20, 20))\nself.v = nn.Parameter(torch.randn(2, 20, 20))"
    for forward in ("x = torch.mm(self.w, x)\nx = torch.relu(x) * 2.0",
                    "x = torch.matmul(x, self.v)\nx = torch.relu(x) * 2.0",
                    "x = torch.bmm(x, x)\nx = torch.relu(x) * 2.0"):
        inputs = "torch.randn(2, 20, 20)" if "bmm" in forward else "torch.randn(20, 20)"
        pattern = capture(load_problem(str(_problem(tmp_path, "left", init, forward, inputs))))
        assert variants(pattern) == ["graph"], (forward, pattern.reason)


@pytest.mark.parametrize("equation, why", [
    ("ij,jk->", "sums i, k within one operand"),
    ("ij,ij->", "sums over 2 letters (i, j)"),
    ("i,j->ij", "sums nothing (an outer product)"),
    ("ii,ij->j", "repeats i in an operand"),
    ("bij,bjk,bkl->bil", "over 3 operand(s)"),
    ("...ij,jk->...ik", "has an ellipsis"),
])
def test_an_einsum_that_is_not_a_product_is_named_with_why(equation, why):
    with pytest.raises(NotAProduct) as caught:
        contraction(equation, equation.split("->")[0].count(",") + 1)
    assert repr(equation) in str(caught.value) and why in str(caught.value)


def test_a_forward_with_a_non_product_einsum_is_refused_with_the_equation(tmp_path):
    """``einsum("ij,ij->", x, w)`` sums over two letters: no GEMM, and the reason names the equation."""
    init = "self.w = nn.Parameter(torch.randn(6, 9))"
    path = _problem(tmp_path, "dots", init, 'x = torch.einsum("ij,ij->", x, self.w)', "torch.randn(6, 9)")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "unsupported", pattern
    assert "einsum 'ij,ij->' sums over 2 letters (i, j)" in pattern.reason, pattern.reason


# (equation, inputs, the whole-forward template, its parameters): einsums of two inputs that are one product
WHOLE = [
    ("bhqd,bhkd->bhqk", "torch.randn(2, 3, 19, 24, dtype=DTYPE), torch.randn(2, 3, 21, 24, dtype=DTYPE)", "bmm",
     {"batch": 6, "trans_a": False, "trans_b": True}),
    ("bkm,bkn->bmn", "torch.randn(3, 24, 19, dtype=DTYPE), torch.randn(3, 24, 21, dtype=DTYPE)", "bmm",
     {"batch": 3, "trans_a": True, "trans_b": False}),
    ("bij,bjk->bki", "torch.randn(2, 19, 24, dtype=DTYPE), torch.randn(2, 24, 21, dtype=DTYPE)", "bmm",
     {"a": "x1", "b": "x0", "trans_a": True, "trans_b": True, "m": 21, "n": 19}),
    ("ij,kj->ik", "torch.randn(19, 24, dtype=DTYPE), torch.randn(21, 24, dtype=DTYPE)", "matmul",
     {"trans_a": False, "trans_b": True, "m": 19, "n": 21, "k": 24}),
]


@pytest.mark.parametrize("dtype", ["float32", pytest.param("float16", marks=pytest.mark.slow)])  # half: slow tier
@pytest.mark.parametrize("equation, inputs, kind, params", WHOLE, ids=[w[0] for w in WHOLE])
def test_an_einsum_of_two_inputs_that_is_one_product_is_the_product_template(tmp_path, monkeypatch, equation, inputs,
                                                                              kind, params, dtype):
    """A batched product with the second factor transposed (attention's scores), the first factor
    transposed, the output transposed (the factors swapped, both read transposed), a plain product
    with B transposed: the whole forward is the ``bmm`` / ``matmul``
    template with those transposes, judged correct."""
    path = _problem(tmp_path, "einsum2", "", f'x = torch.einsum("{equation}", x, y)', inputs, dtype, args="x, y")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == kind and {k: dict(pattern.params)[k] for k in params} == params, pattern
    judged_correct(path, {"block": 64, "chunk": 16, "warps": 4}, tmp_path, monkeypatch)


@pytest.mark.parametrize("case, says", [
    # the einsum with the matrix on the left and its summed dimension in the middle: F.linear over
    # the moved input and the transposed matrix, the subtraction after it one Triton pass in place
    ("einsum", "y = F.linear(x0, w)"),
    # a batch of matrices: torch.bmm over the transposed view, the bias and ReLU one Triton pass in place
    pytest.param("bmm", "y = torch.bmm(x0, w.transpose(1, 2))", marks=pytest.mark.slow)])
def test_under_relaxed_the_product_runs_in_cublas_and_its_epilogue_in_triton(tmp_path, monkeypatch, case, says):
    """The ``cublas`` move: the product in cuBLAS, the work after it one Triton pass in place;
    judged correct under the relaxed policy."""
    from loopwise.kernels.expert.generate import generate

    from expert_judging import judge_on_cpu

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    name, init, forward, inputs, _ = {"einsum": PRODUCTS[4], "bmm": BATCHED[0]}[case]
    problem = load_problem(str(_problem(tmp_path, name, init, forward, inputs)))
    source, _ = generate(problem, {"template": "graph_linear", "cublas": 1, "block": 64}, precision="relaxed")
    assert says in source and "linear_0_epilogue_kernel" in source
    judge_on_cpu(problem, source, f"cublas-{case}", tmp_path, precision="relaxed")
