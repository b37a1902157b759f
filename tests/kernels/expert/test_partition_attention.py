"""Attention parts of a partitioned forward: F.scaled_dot_product_attention as one flash-style
Triton pass among the plan's others, with PyTorch's causal mask, attention masks (boolean or
added), scale and dtypes; a call the kernel does not compute (dropout, grouped heads) stays in
PyTorch."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.generate import render
from loopwise.kernels.expert.partition import kinds, plan
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct  # noqa: E402 - tests/kernels/expert on sys.path

SDPA = "F.scaled_dot_product_attention"
CASES = {  # forward, inputs (q from x, then k and v), dtype
    "scaled_odd": (f"x = {SDPA}(x * 2.0, k, v, scale=0.3)\nx = torch.tanh(x) + 1.0",
                   "torch.randn(2, 3, 37, 24, dtype=DTYPE), torch.randn(2, 3, 45, 24, dtype=DTYPE), "
                   "torch.randn(2, 3, 45, 20, dtype=DTYPE)", "float32"),
    "causal_fewer_queries": (f"x = {SDPA}(x, k, v, is_causal=True)\nx = {SDPA}(x, k, v, is_causal=True)",
                             "torch.randn(3, 19, 16, dtype=DTYPE), torch.randn(3, 45, 16, dtype=DTYPE), "
                             "torch.randn(3, 45, 16, dtype=DTYPE)", "float16"),
    # a boolean mask over (queries, keys) for every head, its second query seeing no key (zeros out)
    "bool_mask": (f"m = torch.ones(19, 45, dtype=torch.bool, device=x.device).tril(3)\nm[1] = False\n"
                  f"x = {SDPA}(x, k, v, attn_mask=m) * 2.0",
                  "torch.randn(2, 3, 19, 16, dtype=DTYPE), torch.randn(2, 3, 45, 16, dtype=DTYPE), "
                  "torch.randn(2, 3, 45, 8, dtype=DTYPE)", "float32"),
    # a float mask per batch entry, broadcast over the heads, added to the scores
    "float_mask": (f"x = {SDPA}(x, k, v, attn_mask=torch.tanh(k[:, :1, :19, :1] * v[:, :1, :, 0].unsqueeze(2)))",
                   "torch.randn(2, 3, 19, 16, dtype=DTYPE), torch.randn(2, 3, 45, 16, dtype=DTYPE), "
                   "torch.randn(2, 3, 45, 16, dtype=DTYPE)", "float16"),
    # a float32 mask of finfo's min (as Hugging Face pads) over whole query rows: PyTorch's softmax
    # subtracts the row's max before the exponential, so such a row is the plain average of v
    "min_mask_row": (f"m = torch.zeros(19, 45, dtype=x.dtype, device=x.device)\nm[3] = -3.4028234663852886e38\n"
                     f"m[:, 40:] = -3.4028234663852886e38\nx = {SDPA}(x, k, v, attn_mask=m)",
                     "torch.randn(2, 3, 19, 16, dtype=DTYPE), torch.randn(2, 3, 45, 16, dtype=DTYPE), "
                     "torch.randn(2, 3, 45, 16, dtype=DTYPE)", "float32"),
    "transposed_heads": (f"x = {SDPA}(x.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)",
                         "torch.randn(2, 33, 3, 32, dtype=DTYPE), torch.randn(2, 33, 3, 32, dtype=DTYPE), "
                         "torch.randn(2, 33, 3, 32, dtype=DTYPE)", "float32"),
}


def _captured(tmp_path, name):
    forward, inputs, dtype = CASES[name]
    path = _problem(tmp_path, name, "", forward, inputs, dtype, args="x, k, v")
    return path, capture(load_problem(str(path)))


def test_attention_calls_are_parts_of_the_norm_plan_with_their_options(tmp_path):
    """Each call is one part; the scale given, or 1/sqrt(d), and the causal flag are the call's."""
    _, pattern = _captured(tmp_path, "scaled_odd")
    (part,) = [n for n in plan(pattern, "graph_norm")["norms"] if n.kind == "attention"]
    assert (part.attention.scale, part.attention.causal, part.out_dtype) == (0.3, False, "float32")
    _, pattern = _captured(tmp_path, "causal_fewer_queries")
    chosen = plan(pattern, "graph_norm")
    assert [n.attention.causal for n in chosen["norms"]] == [True, True] and chosen["pytorch"] == ()
    assert chosen["norms"][0].attention.scale == 16 ** -0.5 and chosen["norms"][0].out_dtype == "float16"



def test_a_bfloat16_attention_is_a_part_in_its_own_dtype(tmp_path):
    """(Triton's interpreter multiplies bf16 as its bits, so the bf16 kernel is judged on a GPU only.)"""
    path = _problem(tmp_path, "bf16", "", f"x = {SDPA}(x, k, v, is_causal=True) * 2.0",
                    "torch.randn(2, 9, 16, dtype=DTYPE), torch.randn(2, 9, 16, dtype=DTYPE), "
                    "torch.randn(2, 9, 16, dtype=DTYPE)", "bfloat16", args="x, k, v")
    (part,) = plan(capture(load_problem(str(path))), "graph_norm")["norms"]
    assert (part.kind, part.attention.dtype, part.out_dtype) == ("attention", "bfloat16", "bfloat16")


def test_a_masked_attention_reads_its_mask_as_a_fourth_input(tmp_path):
    for name, kind in (("bool_mask", 1), ("float_mask", 2)):
        _, pattern = _captured(tmp_path, name)
        (part,) = [n for n in plan(pattern, "graph_norm")["norms"] if n.kind == "attention"]
        assert (part.inputs, part.attention.mask) == (4, kind), pattern.reason
    # the mask made in forward on the input's device: ``device=`` stays a keyword in the written forward
    source = render(_captured(tmp_path, "bool_mask")[1], {"template": "graph_norm"})
    compile(source, "bool_mask", "exec")
    assert "device = getattr_1" in source or "device=getattr_1" in source


@pytest.mark.parametrize("call", [f"{SDPA}(x, k[:, :2], v[:, :2], enable_gqa=True)", f"{SDPA}(x, k, v, dropout_p=0.1)"])
def test_attention_with_dropout_or_grouped_heads_stays_in_pytorch(tmp_path, call):
    path = _problem(tmp_path, "dropped", "", f"x = torch.sigmoid({call}) * 2.0 + 1.0",
                    "torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)", args="x, k, v")
    pattern = capture(load_problem(str(path)))
    assert "graph_norm" not in kinds(pattern) and "scaled_dot_product_attention" in plan(pattern, "graph")["pytorch"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_attention_parts_are_judged_correct(tmp_path, monkeypatch, name):
    path, _ = _captured(tmp_path, name)
    judged_correct(path, {"template": "graph_norm"}, tmp_path, monkeypatch)


# Attention written out: softmax(q @ k^T, scaled, masked) @ v, as models write it (minGPT, L3/43).
EXPLICIT = {  # init, forward, inputs, dtype
    # a causal buffer sliced to the sizes, whose first query sees no key: NaN there, as written
    "explicit_buffer_mask": (
        "self.register_buffer('bias', torch.ones(64, 64).tril(-1).view(1, 1, 64, 64))",
        "s = (x @ k.transpose(-2, -1)) * 0.25\ns = s.masked_fill(self.bias[:, :, :19, :45] == 0, float('-inf'))\n"
        "s = F.softmax(s, dim=-1)\ns = F.dropout(s, p=0.0)\nx = s @ v",
        "torch.randn(2, 3, 19, 16, dtype=DTYPE), torch.randn(2, 3, 45, 16, dtype=DTYPE), "
        "torch.randn(2, 3, 45, 8, dtype=DTYPE)", "float32"),
    # divided, a float mask added, the key transposed by permute, softmax as a module
    "explicit_divided_added": (
        "self.soft = nn.Softmax(dim=-1)",
        "s = torch.matmul(x, k.permute(0, 2, 1)) / 4.0 + torch.tanh(v[:1, :19, :1] * v[:1, :, 1].unsqueeze(1))\n"
        "x = torch.matmul(self.soft(s), v) + 1.0",
        "torch.randn(3, 19, 16, dtype=DTYPE), torch.randn(3, 45, 16, dtype=DTYPE), torch.randn(3, 45, 16, dtype=DTYPE)",
        "float16"),
}


def _explicit(tmp_path, name, forward=None):
    init, written, inputs, dtype = EXPLICIT[name]
    path = _problem(tmp_path, name, init, forward or written, inputs, dtype, args="x, k, v")
    return path, capture(load_problem(str(path)))


def test_attention_written_out_is_an_attention_part(tmp_path):
    """The chain becomes one part: its scale (multiplied, divided), its mask (masked_fill's,
    inverted: a boolean mask; an added one), NaN for a query with no key; the softmax, the products
    and the scores' transpose are gone from what stays in PyTorch."""
    _, pattern = _explicit(tmp_path, "explicit_buffer_mask")
    chosen = plan(pattern, "graph_norm")
    (part,) = chosen["norms"]
    assert (part.kind, part.inputs, part.attention.scale, part.attention.mask, part.attention.empty_nan,
            part.attention.causal) == ("attention", 4, 0.25, 1, True, False)
    assert {"matmul", "softmax", "masked_fill", "dropout"}.isdisjoint(chosen["pytorch"])
    assert "logical_not" in chosen["pytorch"]
    # the other plans keep the chain as written
    assert "graph_norm" in kinds(pattern) and all(
        "scaled_dot_product_attention" not in plan(pattern, k)["pytorch"] for k in kinds(pattern) if k != "graph_norm")
    _, pattern = _explicit(tmp_path, "explicit_divided_added")
    (part,) = [n for n in plan(pattern, "graph_norm")["norms"] if n.kind == "attention"]
    assert (part.attention.scale, part.attention.mask, part.attention.dtype) == (0.25, 2, "float16")


@pytest.mark.parametrize("forward", [
    # the scores read twice
    "s = (x @ k.transpose(-2, -1)) * 0.25\nx = F.softmax(s, dim=-1) @ v + s[..., :8]",
    # softmax over the queries
    "s = (x @ k.transpose(-2, -1)) * 0.25\nx = F.softmax(s, dim=-2).transpose(-2, -1) @ x",
    # a finite fill: a row with no key is the mean of v, not an attention call's
    "s = (x @ k.transpose(-2, -1)).masked_fill(self.bias[:, :, :19, :45] == 0, -1e9)\nx = F.softmax(s, dim=-1) @ v",
    # k not transposed over its last two dimensions
    "s = x @ k.transpose(-3, -1)\nx = F.softmax(s, dim=-1) @ v",
])
def test_attention_written_otherwise_stays_as_written(tmp_path, forward):
    init, _, _, dtype = EXPLICIT["explicit_buffer_mask"]
    inputs = "torch.randn(2, 3, 19, 16), torch.randn(2, 3, 45, 16), torch.randn(2, 3, 45, 8)"
    if "-3" in forward:
        inputs = "torch.randn(2, 5, 19, 16), torch.randn(2, 45, 16, 5), torch.randn(2, 5, 45, 8)"
    path = _problem(tmp_path, "otherwise", init, forward, inputs, dtype, args="x, k, v")
    pattern = capture(load_problem(str(path)))
    assert "graph_norm" in kinds(pattern), pattern.reason  # the softmax is a row part
    assert all(n.kind != "attention" for k in kinds(pattern) for n in plan(pattern, k)["norms"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPLICIT))
def test_attention_written_out_is_judged_correct(tmp_path, monkeypatch, name):
    """Judged against the reference as written: the buffer's first query is NaN in both."""
    path, _ = _explicit(tmp_path, name)
    judged_correct(path, {"template": "graph_norm"}, tmp_path, monkeypatch)


PROJECTED = (  # minGPT's shape: projections around the attention written out
    "self.qkv = nn.Linear(16, 48)\nself.proj = nn.Linear(16, 16)",
    "q, k, v = self.qkv(x).split(16, dim=2)\nq, k, v = [t.view(2, 11, 2, 8).transpose(1, 2) for t in (q, k, v)]\n"
    "s = (q @ k.transpose(-2, -1)) * (1.0 / 8 ** 0.5)\nx = F.softmax(s, dim=-1) @ v\n"
    "x = self.proj(x.transpose(1, 2).contiguous().view(2, 11, 16))",
    "torch.randn(2, 11, 16, dtype=DTYPE)")


def test_the_gemm_plan_computes_the_attention_as_a_part_too(tmp_path):
    init, forward, inputs = PROJECTED
    pattern = capture(load_problem(str(_problem(tmp_path, "projected", init, forward, inputs))))
    chosen = plan(pattern, "graph_linear")
    assert [g.ops for g in chosen["gemms"]] == [("linear",), ("linear",)]
    assert [n.kind for n in chosen["norms"]] == ["attention"] and "matmul" not in chosen["pytorch"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["graph_norm", "graph_linear"])
def test_projected_attention_is_judged_correct(tmp_path, monkeypatch, kind):
    init, forward, inputs = PROJECTED
    path = _problem(tmp_path, "projected", init, forward, inputs)
    judged_correct(path, {"template": kind}, tmp_path, monkeypatch)
