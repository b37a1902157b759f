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
