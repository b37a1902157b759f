"""Attention with heads too wide for one flash pass (KernelBench L1/97: every program would
recompute the scores) as three Triton parts of the plan, as PyTorch computes it: the scores
``q @ k^T`` a batched GEMM whose epilogue applies the scale and the causal or attention mask,
the softmax over the keys a row part, ``weights @ v`` a batched GEMM; whether the attention is a
whole forward, one call among other work, or written out."""

import ast

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.generate import fits, render, variants
from loopwise.kernels.expert.partition import kinds, plan
from loopwise.kernels.expert.partition.records import ScoresOp
from loopwise.kernels.problem import load_problem

from expert_judging import captured, generated_style_problem, judged_correct, problem_variant  # noqa: E402 - tests/kernels/expert on sys.path

WIDE = "attention_wide.py"  # KernelBench L1/97's forward and sizes
_SIZES = "batch_size = 32\nnum_heads = 32\nsequence_length = 512\nembedding_dimension = 1024"
SMALL = {_SIZES: "batch_size = 2\nnum_heads = 2\nsequence_length = 40\nembedding_dimension = 300"}
SMALLER = {_SIZES: "batch_size = 1\nnum_heads = 2\nsequence_length = 17\nembedding_dimension = 300"}

SDPA = "F.scaled_dot_product_attention"
CASES = {  # forward of (x, k, v) setting x, the inputs, dtype; the scores part's ScoresOp, the softmax's zeros for a row of -inf
    "plain_512": (f"x = {SDPA}(x, k, v)", "2, 2, 33, 512", "2, 2, 33, 512", "2, 2, 33, 512", "float32",
                  ScoresOp(512 ** -0.5), True),
    # a boolean mask over (queries, keys) for every head, its fourth query seeing no key: zeros there
    "bool_mask_empty_row": ("m = torch.ones(40, 40, dtype=torch.bool, device=x.device).tril(5)\nm[3] = False\n"
                            f"x = {SDPA}(x, k, v, attn_mask=m)", "2, 2, 40, 300", "2, 2, 40, 300", "2, 2, 40, 300",
                            "float32", ScoresOp(300 ** -0.5, mask=1), True),
    # a float mask per batch entry, broadcast over the heads, added to the scores; a scale given
    "added_mask_256": (f"x = {SDPA}(x, k, v, attn_mask=torch.tanh(k[:, :1, :19, :1] * v[:, :1, :, 0].unsqueeze(2)), "
                       "scale=0.1)", "2, 3, 19, 256", "2, 3, 45, 256", "2, 3, 45, 260", "float32",
                       ScoresOp(0.1, mask=2), True),
    # causal (top-left) with more keys than queries, 3-D inputs
    "causal_more_keys": (f"x = {SDPA}(x, k, v, is_causal=True)", "3, 19, 512", "3, 45, 512", "3, 45, 512",
                         "float32", ScoresOp(512 ** -0.5, causal=True), True),
    # written out with masked_fill: the mask read as it is (True drops a key), a query seeing no key NaN
    "written_out_empty_row": ("s = (x @ k.transpose(-2, -1)) / 16.0\n"
                              "s = s.masked_fill(torch.ones(40, 40, device=x.device).tril(-1) == 0, float('-inf'))\n"
                              "x = F.softmax(s, dim=-1) @ v", "2, 2, 40, 300", "2, 2, 40, 300", "2, 2, 40, 300",
                              "float32", ScoresOp(1 / 16.0, mask=3), False),
    # half precision: the scores stored in fp32, the weights in fp16
    "half_causal_512": (f"x = {SDPA}(x, k, v, is_causal=True)", "2, 2, 33, 512", "2, 2, 33, 512", "2, 2, 33, 512",
                        "float16", ScoresOp(512 ** -0.5, causal=True), True),
}


def _problem(tmp_path, name):
    forward, qs, ks, vs, dtype, _, _ = CASES[name]
    inputs = ", ".join(f"torch.randn({s}, dtype=DTYPE)" for s in (qs, ks, vs))
    return generated_style_problem(tmp_path, name, "", forward, inputs, dtype, args="x, k, v")


def _split_parts(chosen):
    """(scores GEMM, values GEMM, softmax row part) of a plan whose only work is one split attention."""
    (scores, values), (softmax,) = chosen["gemms"], chosen["norms"]
    assert not chosen["groups"] and not scores.weight and not values.weight
    assert softmax.kind == "row" and softmax.row.op == "softmax" and softmax.ops == ("softmax",)
    return scores, values, softmax


def _torch_products(source: str) -> list[str]:
    """The calls of ``source`` (and ``@`` products) that are PyTorch's matmul, bmm, softmax or attention."""
    names = {"matmul", "bmm", "baddbmm", "mm", "einsum", "softmax", "_safe_softmax", "scaled_dot_product_attention"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found.append("@")
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            found += [name] if name in names else []
    return found


def test_level1_97_is_a_scores_gemm_a_softmax_and_a_values_gemm():
    """The whole forward's attention (refused as a flash pass, with the reason) is the three parts
    in each plan, nothing left in PyTorch; the GEMM plan's tiles are its own moves."""
    pattern = captured(WIDE)
    assert pattern.kind == "graph" and sorted(variants(pattern)) == sorted(["graph_norm", "graph_linear"]), pattern.reason
    assert "head dimension 1024" in pattern.reason and "recompute" in pattern.reason
    for kind in kinds(pattern):
        chosen = plan(pattern, kind)
        scores, values, softmax = _split_parts(chosen)
        assert (scores.scores, scores.out_dtype, scores.ops) == (ScoresOp(1 / 32), "float32", ("matmul", "scale"))
        assert (values.weight_kn, values.causal_rows, values.out_dtype) == (True, False, "float32")
        assert softmax.row.safe and softmax.out_dtype == "float32" and chosen["pytorch"] == ()
    assert fits(pattern, {"template": "graph_linear", "tile": 64, "chunk": 16, "gemm_warps": 4})
    # no Linear for cuBLAS to take: the cublas move would change nothing
    assert not fits(pattern, {"template": "graph_linear", "cublas": 1})


@pytest.mark.parametrize("name", list(CASES))
def test_wide_attention_is_split_with_its_scale_and_masks(tmp_path, name):
    """Hand-written attentions of 256- to 512-wide heads, masked or causal or neither, SDPA or
    written out: the scores part carries the call's scale and mask, the softmax gives zeros for a
    query with no key where the call does (NaN where it was written out), and the candidate calls
    none of PyTorch's products or softmax."""
    *_, dtype, expected, safe = CASES[name]
    pattern = capture(load_problem(str(_problem(tmp_path, name))))
    assert "graph_norm" in kinds(pattern), pattern.reason
    scores, values, softmax = _split_parts(plan(pattern, "graph_norm"))
    assert scores.scores == expected and values.causal_rows == expected.causal
    assert (softmax.row.safe, scores.dtype, scores.out_dtype, softmax.out_dtype) == (safe, dtype, "float32", dtype)
    assert {"logical_not", "masked_fill", "matmul", "softmax"}.isdisjoint(plan(pattern, "graph_norm")["pytorch"])
    for kind in kinds(pattern):
        source = render(pattern, {"template": kind})
        assert _torch_products(source) == [] and "linear_0_kernel[" in source and "rowop_0_kernel[" in source


@pytest.mark.slow
def test_a_small_level1_97_is_judged_correct(tmp_path, monkeypatch):
    """L1/97 at 2 heads of 17 queries, 300 wide: the three parts judged in Triton's interpreter
    (a softmax over the last dimension is a program per query there: few queries keep it short)."""
    path = problem_variant(tmp_path, WIDE, SMALLER)
    judged_correct(path, {"template": "graph_norm"}, tmp_path, monkeypatch)


@pytest.mark.slow
def test_level1_97_at_2_x_2_heads_of_40_queries_is_judged_correct(tmp_path, monkeypatch):
    judged_correct(problem_variant(tmp_path, WIDE, SMALL), {"template": "graph_norm"}, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_split_attention_is_judged_correct(tmp_path, monkeypatch, name):
    """Each case judged, on the GEMM plan's smaller tiles (a K step of 16, four ragged tiles a side)."""
    judged_correct(_problem(tmp_path, name), {"template": "graph_linear", "tile": 64, "chunk": 16}, tmp_path, monkeypatch)


# Attention inside a bigger forward: projections (nn.Linear), heads split out, a causal attention
# of 256-wide heads, the heads merged and projected back.
BLOCK = """self.qkv = nn.Linear(512, 3 * 512)
self.proj = nn.Linear(512, 512)"""
BLOCK_FORWARD = """b, t, c = x.shape
q, k, v = self.qkv(x).split(512, dim=2)
q = q.view(b, t, 2, 256).transpose(1, 2)
k = k.view(b, t, 2, 256).transpose(1, 2)
v = v.view(b, t, 2, 256).transpose(1, 2)
y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
x = self.proj(y.transpose(1, 2).contiguous().view(b, t, c))"""


def _block(tmp_path):
    return generated_style_problem(tmp_path, "attention_block", BLOCK, BLOCK_FORWARD, "torch.randn(2, 37, 512)")


def test_attention_inside_a_bigger_forward_is_split_beside_its_projections(tmp_path):
    """The GEMM plan: the projections GEMMs with a model matrix, the attention its three parts;
    the cublas move takes the projections alone."""
    pattern = capture(load_problem(str(_block(tmp_path))))
    chosen = plan(pattern, "graph_linear")
    products = [g for g in chosen["gemms"] if not g.weight]
    assert [g.ops for g in products] == [("matmul", "scale", "causal_mask"), ("matmul",)]
    assert [g.weight for g in chosen["gemms"] if g.weight] == ["qkv.weight", "proj.weight"]
    assert [n.ops for n in chosen["norms"]] == [("softmax",)] and "scaled_dot_product_attention" not in chosen["pytorch"]
    source = render(pattern, {"template": "graph_linear", "cublas": 1})
    assert "linear_2_kernel[" in source and "linear_3_kernel[" in source and "F.linear(x0, w, b)" in source
    assert fits(pattern, {"template": "graph_linear", "cublas": 1, "tile": 64})  # the attention's GEMMs take the tile


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["graph_norm", "graph_linear"])
def test_attention_inside_a_bigger_forward_is_judged_correct(tmp_path, monkeypatch, kind):
    judged_correct(_block(tmp_path), {"template": kind}, tmp_path, monkeypatch)
