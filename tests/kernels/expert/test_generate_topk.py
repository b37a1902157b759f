"""Top-k over short k: any dimension, largest or smallest, values, indices or both, long lines in chunks."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.problem import load_problem

from expert_judging import HERE, judged_correct, judged_variant, problem_variant, tiered  # noqa: E402 - tests/kernels/expert on sys.path


def test_topk_values_of_rows_are_judged_correct(tmp_path, monkeypatch):
    """The 5 largest of each row of 700: one chunk of 1024 holds the whole line."""
    source = judged_correct(HERE / "topk_rows.py", {}, tmp_path, monkeypatch)
    assert "BLOCK_R=1024" in source and "K=5, K_PAD=8" in source


@pytest.mark.parametrize("forward, inputs, moves, params", tiered([
    # a middle dimension, smallest, both outputs, lines walked in chunks of 256 (the merge across chunks)
    ("return torch.topk(x, self.k, dim=1, largest=False)", "[torch.randn(3, 700, 5)]", {"block": 256},
     {"dim": 1, "largest": False, "returns": "both"}),
    # the indices alone, by position
    ("return x.topk(self.k)[1]", "[torch.randn(6, 700)]", {"block": 256}, {"returns": "indices"}),
    # half precision: compared in fp32, stored in fp16
    ("return torch.topk(x, self.k, dim=0)[0]", "[torch.randn(700, 4, dtype=torch.float16)]", {"block": 512},
     {"dim": 0, "dtype": "float16", "returns": "values"}),
], fast={1}))
def test_topk_in_other_forms_is_judged_correct(tmp_path, monkeypatch, forward, inputs, moves, params):
    replacements = {"return torch.topk(x, self.k, dim=-1).values": forward, "[torch.randn(6, 700)]": inputs}
    pattern = judged_variant(tmp_path, monkeypatch, "topk_rows.py", "topk", moves, replacements)
    assert {k: dict(pattern.params)[k] for k in params} == params


@pytest.mark.parametrize("forward, why", [
    ("return torch.topk(x, self.k, sorted=False).values", "sorted=False"),
    ("return torch.topk(x, 100).values", "1 to 64"),
])
def test_topk_the_template_cannot_write_says_why(tmp_path, forward, why):
    """An unsorted selection or a long k is not the template's: captured as something else, with the reason."""
    path = problem_variant(tmp_path, "topk_rows.py", {"return torch.topk(x, self.k, dim=-1).values": forward})
    pattern = capture(load_problem(str(path)))
    assert pattern.kind != "topk" and why in pattern.reason


def test_topk_and_bmm_compile_for_hopper_without_a_gpu(tmp_path):
    """The data-dependent skip of a chunk and the k selections build for sm_90, as does the batched
    product in bf16 (Triton's interpreter runs neither the GPU compiler nor its type rules)."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from expert_judging import load_candidate
    from loopwise.kernels.expert import generate

    source, _ = generate(load_problem(str(HERE / "topk_rows.py")))
    topk = load_candidate(source, tmp_path, "topk_aot")
    signature = {"x_ptr": "*fp16", "v_ptr": "*fp16", "i_ptr": "*i64", "R": "i32", "INNER": "i32",
                 "K": "constexpr", "K_PAD": "constexpr", "BLOCK_R": "constexpr", "LARGEST": "constexpr"}
    for largest in (True, False):
        compiled = triton.compile(ASTSource(topk.topk_kernel, signature,
                                            {"K": 5, "K_PAD": 8, "BLOCK_R": 1024, "LARGEST": largest}),
                                  target=GPUTarget("cuda", 90, 32))
        assert len(compiled.asm["cubin"]) > 1000
    path = problem_variant(tmp_path, "bmm_odd.py", {"torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)":
                                                    "torch.randn(BATCH, M, K).bfloat16(), torch.randn(BATCH, K, N).bfloat16()"})
    bmm = load_candidate(generate(load_problem(str(path)))[0], tmp_path, "bmm_aot")
    signature = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16",
                 **{name: "i32" for name in ("M", "N", "K", "s_ab", "s_am", "s_ak", "s_bb", "s_bk", "s_bn",
                                             "s_cb", "s_cm", "s_cn")},
                 "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "GROUP_M": "constexpr"}
    compiled = triton.compile(ASTSource(bmm.bmm_kernel, signature, {"BM": 128, "BN": 128, "BK": 32, "GROUP_M": 8}),
                              target=GPUTarget("cuda", 90, 32))
    assert len(compiled.asm["cubin"]) > 1000
