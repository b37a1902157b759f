"""Depthwise convolutions of a partitioned forward (groups == channels; causal ones padded by an
F.pad before them) as Triton pool parts of the graph_norm plan, the elementwise work around them
fused in, judged against the reference in Triton's interpreter."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.partition import kinds, plan
from loopwise.kernels.problem import load_problem

from expert_judging import compiles_for_hopper_without_spills, generated_style_problem as _problem, judged_parts  # noqa: E402 - tests/kernels/expert on sys.path

_CAUSAL = "self.w = nn.Parameter(torch.randn(3, 1, 4) * 0.5)\nself.b = nn.Parameter(torch.randn(3))"

# (forward lines, the parts' operations, model tensors, input shape): each depthwise convolution
# one pool part, the pad before it folded into its window, the work around it fused in
CASES = {
    # causal: three zeros padded on the left by F.pad, odd length, a tensor broadcast after it
    "causal_conv1d": ("x = F.conv1d(F.pad(torch.tanh(x), (3, 0)), self.w, self.b, groups=3) * self.s",
                      [("tanh", "conv1d", "mul")], _CAUSAL + "\nself.s = nn.Parameter(torch.randn(3, 1))", "1, 3, 11"),
}

SLOW_CASES = {
    # a module: a rectangular kernel, strides, padding and dilation per dimension, no bias
    "conv2d_module": ("x = torch.relu(self.c(x + 1.0))", [("add", "conv2d", "relu")],
                      "self.c = nn.Conv2d(5, 5, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=5, "
                      "bias=False)", "1, 5, 5, 4"),
    # the call's own padding and a pad on both sides added together; unbatched (C, L) input
    "conv1d_padded_twice": ("x = F.conv1d(F.pad(x, (1, 2)), self.w, self.b, padding=2, stride=3, groups=3)",
                            [("conv1d",)], _CAUSAL, "3, 31"),
    "conv3d_module": ("x = self.c(torch.tanh(x)) * 2.0", [("tanh", "conv3d", "mul")], "self.c = nn.Conv3d(3, 3, 2, padding=1, groups=3)",
                      "1, 3, 3, 2, 2"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_depthwise_convolution_is_a_pool_part_with_its_pad_folded_in(tmp_path, monkeypatch, name):
    """A depthwise (causal) convolution: one Triton part, the F.pad before it no longer in PyTorch
    (entries outside the input read as zeros), the work around it fused in; judged correct."""
    forward, parts, init, shape = CASES[name]
    chosen = judged_parts(tmp_path, monkeypatch, name, forward, parts, init, shape, "pool")
    assert chosen["pytorch"] == ()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_CASES))
def test_more_depthwise_convolutions_are_judged_correct(tmp_path, monkeypatch, name):
    """nn.Conv2d / nn.Conv3d with groups == channels (strides, dilation, no bias), and a call's
    padding added to an F.pad's on both sides of an unbatched input."""
    forward, parts, init, shape = SLOW_CASES[name]
    judged_parts(tmp_path, monkeypatch, name, forward, parts, init, shape, "pool")


@pytest.mark.slow
def test_a_half_precision_causal_convolution(tmp_path, monkeypatch):
    """An fp16 causal depthwise convolution: weights and input upcast, the sum in fp32, stored fp16."""
    forward = "x = F.conv1d(F.pad(x * 2.0, (3, 0)), self.w, self.b, groups=3)"
    chosen = judged_parts(tmp_path, monkeypatch, "half", forward, [("mul", "conv1d")], _CAUSAL + "\nself.to(DTYPE)",
                          "1, 3, 21", "pool", "float16")
    assert chosen["norms"][0].pool.out_dtype == "float16"


@pytest.mark.parametrize("init,conv,left", [
    # every output channel reads every input channel: the GEMM templates' (graph_conv), not a pool part
    ("self.c = nn.Conv1d(4, 4, 3)", "self.c(x)", "Conv1d"),
    # two output channels a group (a channel multiplier)
    ("self.w = nn.Parameter(torch.randn(8, 1, 3))", "F.conv1d(x, self.w, groups=4)", "conv1d"),
    # a reflected pad is not zeros: it stays in PyTorch, the convolution (a part) reads its output
    ("self.w = nn.Parameter(torch.randn(4, 1, 3))", "F.conv1d(F.pad(x, (2, 0), mode='reflect'), self.w, groups=4)", "pad"),
])
def test_convolutions_a_depthwise_part_does_not_compute_stay_out_of_it(tmp_path, init, conv, left):
    """A full convolution, a channel multiplier or a non-zero pad: not folded into a depthwise part
    (the cumsum after it keeps a graph_norm plan)."""
    path = _problem(tmp_path, "left", init, f"x = torch.cumsum({conv}, dim=-1) * 2.0", "torch.randn(2, 4, 9)")
    pattern = capture(load_problem(str(path)))
    assert "graph_norm" in kinds(pattern), pattern.reason
    assert left in plan(pattern, "graph_norm")["pytorch"]


def test_a_causal_convolution_compiles_for_hopper(tmp_path):
    """A bf16 causal depthwise convolution at a realistic size: compiled for sm_90a without spills."""
    pytest.importorskip("triton")
    init = "self.w = nn.Parameter(torch.randn(64, 1, 7))\nself.b = nn.Parameter(torch.randn(64))\nself.to(DTYPE)"
    path = _problem(tmp_path, "causal_aot", init, "x = F.conv1d(F.pad(x, (6, 0)), self.w, self.b, groups=64)",
                    "torch.randn(4, 64, 65536, dtype=DTYPE)", "bfloat16")
    compiles_for_hopper_without_spills(path, "poolop_0_kernel")
