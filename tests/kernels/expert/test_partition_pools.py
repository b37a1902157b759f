"""Poolings of a partitioned forward (max and average, 1-D to 3-D, fixed and adaptive windows) as
Triton parts of the graph_norm plan, the elementwise work around them fused in, judged against the
reference in Triton's interpreter."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.partition import kinds, plan
from loopwise.kernels.problem import load_problem

from expert_judging import compiles_for_hopper_without_spills, generated_style_problem as _problem, judged_parts  # noqa: E402 - tests/kernels/expert on sys.path

# (forward lines, the parts' operations, model tensors, input shape): each pooling one part, the
# elementwise work only it reads before it, the work only its output feeds after it
CASES = {
    # overlapping windows (stride below the kernel), padding and dilation; a per-channel tensor before
    "max_pool1d_padded_dilated": ("x = F.max_pool1d(x * self.s, 3, stride=2, padding=1, dilation=2) + 1.0",
                                  [("mul", "max_pool1d", "add")], "self.s = nn.Parameter(torch.randn(5, 1))",
                                  "1, 5, 17"),
    # the padding left out of the mean
    "avg_pool1d_without_pad": ("x = F.avg_pool1d(x, 4, stride=3, padding=2, count_include_pad=False) - 0.5",
                               [("avg_pool1d", "sub")], "", "6, 23"),
    # windows that overlap and differ in length: floor(o * L / O) to ceil((o + 1) * L / O)
    "adaptive_max_pool2d": ("x = torch.sigmoid(F.adaptive_max_pool2d(x, (5, 3)))",
                            [("adaptive_max_pool2d", "sigmoid")], "", "1, 2, 13, 7"),
    # one output per row: a window longer than a step, walked in several
    "adaptive_avg_pool1d_to_one": ("x = F.adaptive_avg_pool1d(torch.tanh(x), 1) * 2.0",
                                   [("tanh", "adaptive_avg_pool1d", "mul")], "", "3, 150"),
}

SLOW_CASES = {
    # a module, a rectangular window, its output read by an epilogue tensor broadcast against it
    "avg_pool2d_module": ("x = self.pool(torch.relu(x)) * self.w", [("relu", "avg_pool2d", "mul")],
                          "self.pool = nn.AvgPool2d((2, 3), stride=(2, 1), padding=(1, 1))\n"
                          "self.w = nn.Parameter(torch.randn(6))", "2, 2, 5, 6"),
    "max_pool2d_stride": ("x = F.max_pool2d(x, 3, stride=3)", [("max_pool2d",)], "", "2, 3, 14, 12"),
    "adaptive_avg_pool2d_none": ("x = self.pool(x)", [("adaptive_avg_pool2d",)], "self.pool = nn.AdaptiveAvgPool2d((None, 4))",
                                 "3, 5, 9"),
    "max_pool3d": ("x = F.max_pool3d(x + 1.0, 2, stride=(1, 2, 2), padding=1) * 0.5",
                   [("add", "max_pool3d", "mul")], "", "2, 5, 6, 7"),
    "two_pools": ("x = F.max_pool1d(x, 2)\nx = F.avg_pool1d(x, 3, stride=1)", [("max_pool1d",), ("avg_pool1d",)],
                  "", "4, 6, 40"),
}


def _judged(tmp_path, monkeypatch, name, forward, parts, init, shape, dtype="float32"):
    return judged_parts(tmp_path, monkeypatch, name, forward, parts, init, shape, "pool", dtype)


@pytest.mark.parametrize("name", list(CASES))
def test_a_pooling_is_a_triton_part_with_the_work_around_it(tmp_path, monkeypatch, name):
    """Max and average pooling, fixed windows (stride, padding, dilation, padding counted or not)
    and adaptive ones: one Triton part each, the elementwise work only it reads (model tensors
    broadcast included) computed as it is read, the work only its output feeds applied before the
    store; judged correct."""
    forward, parts, init, shape = CASES[name]
    chosen = _judged(tmp_path, monkeypatch, name, forward, parts, init, shape)
    assert chosen["pytorch"] == ()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_CASES))
def test_more_poolings_are_judged_correct(tmp_path, monkeypatch, name):
    """An nn.AvgPool2d with a rectangular window and an epilogue tensor, a strided max_pool2d, an
    adaptive average pooling keeping one length, a padded 3-D max pooling, and two poolings in a row."""
    forward, parts, init, shape = SLOW_CASES[name]
    _judged(tmp_path, monkeypatch, name, forward, parts, init, shape)


def test_a_half_precision_pool_part_computes_in_fp32_and_stores_its_dtype(tmp_path, monkeypatch):
    chosen = _judged(tmp_path, monkeypatch, "half", "x = F.avg_pool2d(x * 0.5, 2) + 1.0",
                     [("mul", "avg_pool2d", "add")], "", "1, 3, 8, 6", "float16")
    assert chosen["norms"][0].pool.out_dtype == "float16"


@pytest.mark.parametrize("forward", [
    "x = F.max_pool1d(torch.tanh(x), 2, ceil_mode=True) * 2.0",
    "x = F.avg_pool2d(torch.tanh(x), 2, divisor_override=3) * 2.0",
    "x, i = F.max_pool1d(torch.tanh(x), 2, return_indices=True)\nx = x * 2.0",
])
def test_poolings_with_options_a_part_does_not_read_stay_in_pytorch(tmp_path, forward):
    """ceil_mode, a divisor override, indices returned: the pooling stays in PyTorch."""
    path = _problem(tmp_path, "left", "", forward, "torch.randn(2, 4, 6, 8)")
    pattern = capture(load_problem(str(path)))
    for kind in kinds(pattern) if pattern.kind == "graph" else ():
        assert not [n for n in plan(pattern, kind)["norms"] if n.kind == "pool"]


def test_a_pooling_of_few_outputs_over_long_windows_stays_in_pytorch_with_the_reason(tmp_path):
    """An adaptive pooling of a (4, 300000) tensor to one value per row would be 4 outputs each
    walking 300000 entries while the GPU idles: it stays in PyTorch and the refusal says so."""
    path = _problem(tmp_path, "idle", "", "x = F.adaptive_max_pool1d(torch.tanh(x), 1)", "torch.randn(4, 300000)")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "unsupported" and "4 output(s) would each walk" in pattern.reason


@pytest.mark.parametrize("forward", ["x = F.max_pool2d(torch.relu(x), 3, stride=2, padding=1) * 2.0",
                                     "x = F.adaptive_avg_pool2d(x * 0.5, (7, 5)) + 1.0"])
def test_the_pool_part_compiles_for_hopper_without_a_gpu(tmp_path, forward):
    """A fixed and an adaptive pool part, bf16, at a realistic size: compiled for sm_90a without spills."""
    pytest.importorskip("triton")
    path = _problem(tmp_path, "pool_aot", "", forward, "torch.randn(8, 64, 56, 56, dtype=DTYPE)", "bfloat16")
    compiles_for_hopper_without_spills(path, "poolop_0_kernel")
