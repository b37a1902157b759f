"""Slices (chunk, split, narrow) and concatenations read through by a fused pass: each output
position read from the piece that holds it, judged against the reference in Triton's interpreter."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.partition import plan
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct  # noqa: E402 - tests/kernels/expert on sys.path


def _graph_ops(path) -> tuple:
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "graph", pattern.reason
    return tuple(op for g in plan(pattern, "graph")["groups"] for op in g.ops), plan(pattern, "graph")["pytorch"]


# (forward lines, inputs, the pass's operations)
CASES = {
    # halves swapped along a middle dimension of odd length (chunks of 4 and 3), work after the cat
    "chunk_swap": ("a, b = x.chunk(2, dim=1)\nx = torch.cat([b, a], dim=1)\nx = torch.relu(x) * 2.0",
                   "torch.randn(3, 7, 5, dtype=DTYPE)", ("cat", "relu", "mul")),
    # three pieces of unequal sections along the last dimension, each with work of its own
    "split_work": ("a, b, c = torch.split(x, [2, 5, 3], dim=-1)\nx = torch.cat([torch.sigmoid(c), b * 3.0, a], dim=2)",
                   "torch.randn(2, 3, 10, dtype=DTYPE)", ("sigmoid", "mul", "cat")),
    # three uneven chunks (3, 3, 2) of the leading dimension reordered, then a shift
    "three_chunks": ("a, b, c = torch.chunk(x, 3, 0)\nx = torch.cat((c, a, b)) - 1.0",
                     "torch.randn(8, 3, 2, dtype=DTYPE)", ("cat", "sub")),
    # basic slices (an Ellipsis, a negative start) of one input concatenated with work between
    "basic_slices": ("x = torch.cat([torch.exp(x[..., -3:]), x[:, 1:4] * 2.0], dim=-1)", "torch.randn(5, 6, dtype=DTYPE)",
                     ("exp", "mul", "cat")),
    # a one-wide piece beside a wider one: read at its own positions, not broadcast as a statistic
    # kept as 1 would be
    "one_wide_piece": ("x = torch.cat([torch.tanh(x[:, :1]), x * 2.0], dim=1) + 1.0", "torch.randn(4, 6, dtype=DTYPE)",
                       ("tanh", "mul", "cat", "add")),
    # a permute copied by contiguous, then the halves of its leading dimension swapped: the copy
    # computed at each half's positions
    "permuted_chunks": ("x = torch.tanh(x).permute(2, 1, 0).contiguous()\na, b = x.chunk(2, dim=0)\n"
                        "x = torch.cat([b, a], dim=0) - 1.0", "torch.randn(4, 3, 6, dtype=DTYPE)",
                        ("tanh", "permute", "cat", "sub")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_concatenation_of_slices_is_read_through_in_one_pass(tmp_path, monkeypatch, name):
    """chunk / split pieces concatenated in another order, with elementwise work before and after:
    one pass, nothing left in PyTorch; judged correct."""
    forward, inputs, ops = CASES[name]
    path = _problem(tmp_path, name, "", forward, inputs)
    assert _graph_ops(path) == (ops, ())
    judged_correct(path, {"block": 32}, tmp_path, monkeypatch)


@pytest.mark.slow
def test_a_cat_of_two_inputs_and_a_narrow_in_half_precision(tmp_path, monkeypatch):
    """torch.cat of two fp16 inputs along the leading dimension and a narrow of the result, then
    a ReLU: one pass reading each input where it lands; judged at the half tolerance."""
    forward = "x = torch.cat([x, y * 2.0], dim=0)\nx = torch.relu(torch.narrow(x, 1, 1, 4)) + 0.5"
    path = _problem(tmp_path, "two", "", forward, "torch.randn(3, 6, dtype=DTYPE), torch.randn(5, 6, dtype=DTYPE)",
                    "float16", args="x, y")
    assert _graph_ops(path) == (("mul", "cat", "relu", "add"), ())
    judged_correct(path, {"block": 32}, tmp_path, monkeypatch)


def test_the_cat_pass_compiles_for_hopper_without_a_gpu(tmp_path):
    pytest.importorskip("triton")
    from loopwise.kernels.expert import generate
    from loopwise.kernels.expert.aot import compile_for_hopper

    forward = "a, b = x.chunk(2, dim=2)\nx = torch.cat([b, a], dim=2)\nx = F.silu(x) * 2.0"
    path = _problem(tmp_path, "cat_aot", "", forward, "torch.randn(16, 512, 1024, dtype=DTYPE)", "bfloat16")
    problem = load_problem(str(path))
    source, _ = generate(problem)
    assert "# cat" in source
    report = compile_for_hopper(source, problem)
    assert report["registers"] > 0 and report["spill_bytes"] == 0
