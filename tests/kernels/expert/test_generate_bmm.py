"""The batched matrix product: one Triton kernel over the batch, under the precision policy."""

import pytest

from loopwise.kernels.expert import capture, generate
from loopwise.kernels.problem import load_problem

from expert_judging import HERE, judge_on_cpu, judged_correct, judged_variant, problem_variant  # noqa: E402 - tests/kernels/expert on sys.path

SMALL = {"block": 64, "chunk": 16, "warps": 4}


def test_bmm_with_odd_sizes_is_judged_correct(tmp_path, monkeypatch):
    """torch.bmm over 3 entries of 33 x 70 by 70 x 45: masked edges on every side."""
    source = judged_correct(HERE / "bmm_odd.py", SMALL, tmp_path, monkeypatch)
    assert 'input_precision="tf32x3"' in source and "bmm_kernel[grid]" in source


@pytest.mark.parametrize("forward, inputs, params", [
    # attention-style scores: 4-D operands, B's last two dimensions swapped
    ("return torch.matmul(A, B.transpose(-1, -2))", "[torch.randn(2, 3, M, K), torch.randn(2, 3, N, K)]",
     {"batch": 6, "trans_a": False, "trans_b": True, "shared_b": False}),
    # a batch of transposed matrices times one shared weight (read as it is, a batch of rows times a
    # matrix is the 2-D matmul kind: test_generate_matmul_rows.py)
    ("return A.mT @ B", "[torch.randn(BATCH, K, M), torch.randn(K, N)]",
     {"batch": 3, "trans_a": True, "shared_a": False, "shared_b": True}),
    # one 2-D A shared by the batch, transposed through torch.transpose
    ("return torch.matmul(torch.transpose(A, 0, 1), B)", "[torch.randn(K, M), torch.randn(BATCH, K, N)]",
     {"batch": 3, "trans_a": True, "shared_a": True, "shared_b": False}),
    ("return torch.matmul(A.mT, B)", "[torch.randn(BATCH, K, M), torch.randn(BATCH, K, N)]",
     {"batch": 3, "trans_a": True}),
])
def test_batched_products_in_other_spellings_are_judged_correct(tmp_path, monkeypatch, forward, inputs, params):
    """4-D operands, a 2-D operand shared by the batch, a transpose on either side: captured as
    ``bmm`` with those parameters, and the candidate is correct."""
    replacements = {"return torch.bmm(A, B)": forward,
                    "[torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]": inputs}
    pattern = judged_variant(tmp_path, monkeypatch, "bmm_odd.py", "bmm", SMALL, replacements)
    assert {k: dict(pattern.params)[k] for k in params} == params


def test_a_product_with_the_models_own_tensor_is_judged_correct(tmp_path, monkeypatch):
    """``torch.bmm(x, self.w)`` with a parameter made in a dtype global's type (as the generated suite
    writes it): the reference's __init__ is copied, and the parameter is the kernel's B."""
    replacements = {
        "    def __init__(self):\n        super().__init__()\n":
            "    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.randn(BATCH, N, K) * K ** -0.5)\n"
            "        self.to(DTYPE)\n",
        "return torch.bmm(A, B)": "return torch.bmm(A, self.w.transpose(1, 2))",
        "def forward(self, A, B)": "def forward(self, A)",
        "[torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]": "[torch.randn(BATCH, M, K, dtype=DTYPE)]",
        "BATCH = 3": "DTYPE = torch.float32\nBATCH = 3"}
    pattern = judged_variant(tmp_path, monkeypatch, "bmm_odd.py", "bmm", SMALL, replacements)
    p = dict(pattern.params)
    assert (p["a"], p["b"], p["trans_b"], pattern.operands, pattern.inputs) == ("x0", "p0", True, ("w",), 1)


def test_batch_dimensions_that_broadcast_are_not_captured(tmp_path):
    """[2, 1, M, K] @ [1, 3, K, N] broadcasts batch dimensions against each other: not covered."""
    path = problem_variant(tmp_path, "bmm_odd.py", {
        "return torch.bmm(A, B)": "return torch.matmul(A, B)",
        "[torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]": "[torch.randn(2, 1, M, K), torch.randn(1, 3, K, N)]"})
    assert capture(load_problem(str(path))).kind != "bmm"


def test_bmm_under_relaxed_uses_tf32_and_fp16_keeps_its_type(tmp_path, monkeypatch):
    """TF32 only under relaxed (judged correct there); an fp16 batch is written in fp16 and compiles."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    problem = load_problem(str(HERE / "bmm_odd.py"))
    relaxed, _ = generate(problem, SMALL, precision="relaxed")
    assert 'input_precision="tf32")' in relaxed
    judge_on_cpu(problem, relaxed, "bmm-relaxed", tmp_path, precision="relaxed")
    half = problem_variant(tmp_path, "bmm_odd.py", {
        "[torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]":
            "[torch.randn(BATCH, M, K, dtype=torch.float16), torch.randn(BATCH, K, N, dtype=torch.float16)]"})
    source, pattern = generate(load_problem(str(half)), SMALL)
    assert dict(pattern.params)["dtype"] == "float16" and "acc.to(c_ptr.dtype.element_ty)" in source
    compile(source, "bmm_half.py", "exec")
