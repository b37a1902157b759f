"""Row operations of a partitioned forward (softmax, log-softmax, reductions and scans over any
dimension) as Triton parts of the graph_norm plan, the elementwise work around them fused in,
judged against the reference in Triton's interpreter."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.partition import kinds, plan
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct, judged_parts  # noqa: E402 - tests/kernels/expert on sys.path

# (forward lines, the parts' operations, model tensors, input shape): each row operation one part,
# the elementwise work only it reads before it, the work only its output feeds after it
CASES = {
    # over the leading dimension, a tensor broadcast over the others read in the prologue
    "log_softmax_leading": ("x = torch.log_softmax(x * self.s, dim=0)\nx = torch.exp(x) * 2.0",
                            [("mul", "log_softmax", "exp", "mul")], "self.s = nn.Parameter(torch.randn(3, 5))",
                            "70, 3, 5"),
    # over a middle dimension of four, a (37, 1) tensor added first; the row longer than a chunk
    "softmax_middle": ("x = torch.softmax(x + self.b, dim=2) - 0.5", [("add", "softmax", "sub")],
                       "self.b = nn.Parameter(torch.randn(37, 1))", "2, 3, 37, 4"),
    # 40 columns after the dimension: strips narrowed to 16 (more programs), the last one ragged
    "softmax_leading_narrowed": ("x = torch.softmax(x, dim=0) * 2.0", [("softmax", "mul")], "", "12, 40"),
    # a reduction's epilogue reads a tensor broadcast against the reduced output
    "mean_middle": ("x = torch.mean(torch.square(x), dim=1) + self.b", [("square", "mean", "add")],
                    "self.b = nn.Parameter(torch.randn(6))", "4, 9, 6"),
    # a scan carried from chunk to chunk (150 positions, 32 a chunk at block 64), a tensor after it
    "cumsum_middle": ("x = torch.cumsum(torch.sigmoid(x), dim=1) * self.w", [("sigmoid", "cumsum", "mul")],
                      "self.w = nn.Parameter(torch.randn(150, 2))", "3, 150, 2"),
    # a reversed scan (flipped, scanned, flipped back) is one part: the line walked from its end,
    # carried from chunk to chunk, read and written where it lies
    "cumsum_reversed_middle": ("x = torch.flip(torch.cumsum(torch.flip(torch.tanh(x) * 2.0, [1]), dim=1), [1]) * self.w",
                               [("tanh", "mul", "cumsum", "mul")], "self.w = nn.Parameter(torch.randn(150, 2))",
                               "3, 150, 2"),
    # an exclusive scan (the scan less its input): the epilogue reads the entry the scan read, so
    # the prologue's value is computed once for both and nothing is left to a pass of its own
    "cumsum_exclusive_middle": ("x = torch.tanh(x) * 2.0\nx = (torch.cumsum(x, dim=1) - x) * self.w",
                                [("tanh", "mul", "cumsum", "sub", "mul")], "self.w = nn.Parameter(torch.randn(150, 2))",
                                "3, 150, 2"),
    # an exclusive product (its input shifted one entry, 1 first, as the generated suite writes it,
    # the slice's length computed from the shape): the part reads entry r - 1 at r, carried from chunk to chunk
    "cumprod_exclusive_middle": ("f = 1.0 + 0.05 * torch.tanh(x)\n"
                                 "f = torch.cat([torch.ones_like(f.narrow(1, 0, 1)), f.narrow(1, 0, f.shape[1] - 1)], dim=1)\n"
                                 "x = torch.cumprod(f, dim=1)", [("tanh", "mul", "add", "cumprod")], "", "3, 150, 2"),
    # a prologue that reads through a gather (index_select by a model index): the part computes
    # each entry of its input where it is read, at the index's position
    "softmax_after_index_select": ("x = torch.softmax(torch.index_select(x, 1, self.idx) * 2.0, dim=1)",
                                   [("index_select", "mul", "softmax")],
                                   "self.register_buffer('idx', torch.randint(0, 70, (90,)))", "4, 70"),
    # dimensions apart (0 and 2, the middle one kept), kept as 1, a tensor broadcast before it
    "std_apart_kept": ("x = torch.std(x * self.s + 10.0, dim=(0, 2), keepdim=True) * 2.0",
                       [("mul", "add", "std", "mul")], "self.s = nn.Parameter(torch.randn(5, 1))", "7, 5, 9"),
    # an index output (int64): the prologue only
    "argmax_middle": ("x = torch.argmax(torch.abs(x) * self.w, dim=1)", [("abs", "mul", "argmax")],
                      "self.w = nn.Parameter(torch.randn(40, 1))", "3, 40, 5"),
}

SLOW_CASES = {
    "logsumexp_last_kept": ("x = torch.logsumexp(torch.relu(x), dim=-1, keepdim=True) * 0.5",
                            [("relu", "logsumexp", "mul")], "", "5, 130"),
    "amax_amin": ("x = torch.amax(x, dim=(0, 1)) - torch.amin(x, dim=0).sum(0)", [("max",), ("min",), ("sum",)], "",
                  "75, 3, 6"),
    "sum_run_kept": ("x = torch.sum(x * x, dim=(1, 2), keepdim=True) + 1.0", [("mul", "sum", "add")], "", "2, 5, 7, 3"),
    "max_values": ("x = torch.max(torch.tanh(x), dim=2).values * 3.0", [("tanh", "max", "mul")], "", "4, 3, 66"),
    "min_indices": ("x = torch.min(x + 1.0, 1)[1]", [("add", "argmin")], "", "3, 70, 2"),
    "cumprod_leading": ("x = torch.cumprod(1.0 + 0.05 * torch.tanh(x), dim=0)", [("tanh", "mul", "add", "cumprod")],
                        "", "90, 6"),
    "cummax_values": ("x = torch.cummax(x * 2.0, dim=1).values - 1.0", [("mul", "cummax", "sub")], "", "3, 100, 2"),
    "cummin_values": ("x = torch.cummin(x, 0)[0]", [("cummin",)], "", "70, 4"),
    "logcumsumexp": ("x = torch.logcumsumexp(x * 3.0, dim=-1)", [("mul", "logcumsumexp")], "", "4, 90"),
    "softmax_times_input": ("x = torch.sigmoid(x)\nx = torch.softmax(x, dim=0) * x", [("sigmoid", "softmax", "mul")], "",
                            "70, 3"),
    "cumsum_exclusive_reversed": ("x = torch.flip(torch.cumsum(torch.flip(x, [0]), dim=0), [0]) - x",
                                  [("cumsum", "sub")], "", "70, 4"),
    "cumsum_exclusive_pad": ("x = torch.cumsum(F.pad(torch.sigmoid(x)[:, :-1], (0, 0, 1, 0)), dim=1) * 2.0",
                             [("sigmoid", "cumsum", "mul")], "", "3, 70, 4"),
    "cummax_exclusive_full": ("x = torch.cummax(torch.cat([torch.full_like(x[:1], -float('inf')), x[:-1]]), dim=0)"
                              ".values.clamp(min=-10.0)", [("cummax", "clamp")], "", "70, 3"),
    # read through a permute, and through a concatenation of the input and work on it
    "cumsum_after_permute": ("x = torch.cumsum(torch.tanh(x.permute(1, 0)) * 2.0, dim=0)", [("tanh", "mul", "cumsum")],
                             "", "4, 70"),
    "logsumexp_of_cat": ("x = torch.logsumexp(torch.cat([x, torch.sigmoid(x)], dim=1) * 2.0, dim=1)",
                         [("sigmoid", "cat", "mul", "logsumexp")], "", "5, 70"),
    "cummax_reversed": ("x = torch.cummax(x.flip(0), dim=0).values.flip(0) - 1.0", [("cummax", "sub")], "", "70, 4"),
    # offset data: the deviations' statistics (no sum of squares to cancel)
    "std_run": ("x = torch.std(x * 3.0 + 100.0, dim=(0, 1))", [("mul", "add", "std")], "", "9, 8, 5"),
    "chained": ("x = torch.softmax(x, dim=1)\nx = torch.cumsum(x, dim=0)\nx = x.sum(1) * 0.5",
                [("softmax",), ("cumsum",), ("sum", "mul")], "", "33, 5"),
}


def _judged(tmp_path, monkeypatch, name, forward, parts, init, shape, dtype="float32"):
    return judged_parts(tmp_path, monkeypatch, name, forward, parts, init, shape, "row", dtype)


@pytest.mark.parametrize("name", list(CASES))
def test_a_row_operation_over_any_dimension_is_a_triton_part_with_the_work_around_it(tmp_path, monkeypatch, name):
    """Softmax, log-softmax, a reduction and a scan over a leading, middle or last dimension (a
    std over dimensions apart): one
    Triton part each, the elementwise work only it reads (model tensors broadcast included) computed
    as it is read, the work only its output feeds applied before the store; judged correct."""
    forward, parts, init, shape = CASES[name]
    chosen = _judged(tmp_path, monkeypatch, name, forward, parts, init, shape)
    assert chosen["pytorch"] == ()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_CASES))
def test_more_row_operations_are_judged_correct(tmp_path, monkeypatch, name):
    """logsumexp (dimension kept), amax / amin, a sum and a std over a run of dimensions,
    torch.max's values and torch.min's indices, cumprod, and row parts reading each other's output."""
    forward, parts, init, shape = SLOW_CASES[name]
    _judged(tmp_path, monkeypatch, name, forward, parts, init, shape)


@pytest.mark.parametrize("dtype,forward,parts", [
    ("float16", "x = torch.softmax(x * 0.5, dim=0) + 1.0", [("mul", "softmax", "add")]),
    ("bfloat16", "x = torch.sum(torch.relu(x), dim=0)", [("relu", "sum")]),
])
def test_half_precision_row_parts_compute_in_fp32_and_store_their_dtype(tmp_path, monkeypatch, dtype, forward, parts):
    """An fp16 / bf16 row part reads upcast, computes in fp32 and stores the output's dtype."""
    chosen = _judged(tmp_path, monkeypatch, "half", forward, parts, "", "33, 10", dtype)
    assert chosen["norms"][0].row.out_dtype == dtype


@pytest.mark.parametrize("forward,left", [
    ("x = torch.cumsum(torch.sigmoid(x * 2.0), dim=1, dtype=torch.float64).float()\nx = torch.tanh(x) + 1.0", "cumsum"),
    ("x = torch.softmax(torch.sigmoid(x * 2.0), dim=1, dtype=torch.float64).float()\nx = torch.tanh(x) + 1.0",
     "softmax"),
    # flipped along another dimension than the scan's: no reversed scan, the flips stay in PyTorch
    ("x = torch.flip(torch.cumsum(torch.flip(torch.sigmoid(x * 2.0), [0]), dim=1), [0])\nx = torch.tanh(x) + 1.0",
     "flip"),
])
def test_row_operations_with_options_a_part_does_not_read_stay_in_pytorch(tmp_path, forward, left):
    """A dtype argument, or flips along another dimension than a scan's: the operation stays in PyTorch."""
    path = _problem(tmp_path, "left", "", forward, "torch.randn(4, 6, dtype=DTYPE)")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "graph", pattern.reason
    for kind in kinds(pattern):
        assert left in plan(pattern, kind)["pytorch"]


@pytest.mark.parametrize("forward,init,norms,groups", [
    # RMSNorm written out: the statistic's work is the mean's epilogue; the normalization, reading
    # it broadcast per row with the weight and the work after it, the part's second walk of its rows
    ("x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g\nx = torch.erf(x)",
     "self.g = nn.Parameter(torch.randn(70))", [("square", "mean", "add", "rsqrt", "mul", "mul", "erf")], []),
    # a norm over the leading dimension, read broadcast per column
    ("x = x / torch.linalg.vector_norm(x, 2, dim=0, keepdim=True) + 1.0", "", [("norm", "truediv", "add")], []),
    # over the leading dimension, not kept: the statistic (70,) broadcasts per column all the same
    ("x = torch.tanh(x - x.mean(0))", "", [("mean", "sub", "tanh")], []),
    # rows gathered after the normalization: the pass reads the statistic of another row, which
    # another program computes, so it is a pass of its own
    ("x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)\nx = torch.index_select(x, 0, self.idx)",
     "self.register_buffer('idx', torch.arange(6).flip(0))", [("square", "mean", "add", "rsqrt")],
     [("mul", "index_select")]),
    # the statistic read by another pass too (its exp): it is stored, and the normalization is a
    # pass of its own that reads it broadcast
    ("s = x.pow(2).mean(-1, keepdim=True)\nx = x * torch.rsqrt(s + 1e-6) + torch.exp(s).sum()", "",
     [("square", "mean"), ("exp", "sum")], [("add", "rsqrt"), ("mul", "add")]),
])
def test_a_statistic_kept_as_one_is_read_broadcast_by_the_pass_after_it(tmp_path, monkeypatch, forward, init, norms,
                                                                        groups):
    """A reduction kept as 1 (a per-row or per-column statistic) and the elementwise work that reads
    it with the full tensor: one row part whose program computes its rows' statistic, stores it,
    and walks the rows again to compute that work there, reading the statistic back broadcast;
    nothing left in PyTorch but what reads the statistic elsewhere; judged correct."""
    path = _problem(tmp_path, "statistic", init, forward, "torch.randn(6, 70)")
    chosen = plan(capture(load_problem(str(path))), "graph_norm")
    assert [n.ops for n in chosen["norms"]] == norms and [g.ops for g in chosen["groups"]] == groups
    assert bool(groups) == any(n.spread is None for n in chosen["norms"] if n.row and n.row.reduces)
    judged_correct(path, {"template": "graph_norm", "block": 64}, tmp_path, monkeypatch)


def test_a_statistic_read_back_over_rows_split_among_programs(tmp_path, monkeypatch):
    """Two rows of 70,000: each is split among programs (partial sums stored, then merged). In the
    second launch every split's program merges the partials, stores the row's statistic and
    computes the normalization over its own split of the row."""
    path = _problem(tmp_path, "long_rows", "self.g = nn.Parameter(torch.randn(70000))",
                    "x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g", "torch.randn(2, 70000)")
    chosen = plan(capture(load_problem(str(path))), "graph_norm")
    assert [n.ops for n in chosen["norms"]] == [("square", "mean", "add", "rsqrt", "mul", "mul")]
    source = judged_correct(path, {"template": "graph_norm", "block": 8192}, tmp_path, monkeypatch)
    assert "for step, parts in ((1, splits), (2, splits)):" in source
    assert "splits = min(splits, 256)" in source  # the merges of the second launch grow as the splits' square


def test_a_row_part_next_to_a_gather_by_an_index_input(tmp_path, monkeypatch):
    """An int64 index input read by a gather of a log-softmax's output (over the leading
    dimension): the log-softmax is a Triton part, the gather and the work after it a fused pass
    reading through the index; judged correct."""
    forward = "x = torch.log_softmax(x * 2.0, dim=0)\nx = torch.sigmoid(torch.gather(x, 1, idx)) * 3.0"
    path = _problem(tmp_path, "gather", "", forward, "torch.randn(40, 6), torch.randint(0, 6, (40, 9))", args="x, idx")
    pattern = capture(load_problem(str(path)))
    chosen = plan(pattern, "graph_norm")
    assert [n.ops for n in chosen["norms"]] == [("mul", "log_softmax")]
    assert [g.ops for g in chosen["groups"]] == [("gather", "sigmoid", "mul")] and chosen["pytorch"] == ()
    judged_correct(path, {"template": "graph_norm", "block": 64}, tmp_path, monkeypatch)


def test_a_reduction_over_a_whole_large_tensor_is_a_row_part(tmp_path):
    """A sum over every dimension of a (512, 512) tensor, one output from 262,144 entries: a row
    part (its dimension split among programs when the forward runs), nothing left in PyTorch."""
    path = _problem(tmp_path, "whole", "", "x = torch.sum(torch.tanh(x), dim=(0, 1)) * 2.0", "torch.randn(512, 512)")
    chosen = plan(capture(load_problem(str(path))), "graph_norm")
    assert [n.ops for n in chosen["norms"]] == [("tanh", "sum", "mul")] and chosen["pytorch"] == ()


# (forward lines, the parts' operations, model tensors, input shape) of row parts whose reduced
# dimension is split among programs once the thresholds are lowered: the partial results of each
# split (several chunks, the last split ragged) merged by a second launch
SPLIT_CASES = {
    # each split's (maximum, sum of exponentials) merged into the logsumexp, then each split's output
    "log_softmax_leading": ("x = torch.log_softmax(x * self.s, dim=0) + 1.0", [("mul", "log_softmax", "add")],
                            "self.s = nn.Parameter(torch.randn(3))", "203, 3"),
    # each split's (count, mean, sum of squared deviations) merged, over a run of dimensions
    "std_run": ("x = torch.std(x * 3.0 + 100.0, dim=(0, 1)) * self.s", [("mul", "add", "std", "mul")],
                "self.s = nn.Parameter(torch.randn(3))", "25, 9, 3"),
}

SLOW_SPLIT_CASES = {
    # ties across splits (values saturated at 1): the first index wins
    "argmax_ties": ("x = torch.argmax(F.hardsigmoid(x * 4.0), dim=0)", [("mul", "hardsigmoid", "argmax")], "", "203, 3"),
    # each split's total, then each split scanned from the totals before it
    "cumsum_leading": ("x = torch.cumsum(x, dim=0) * 0.5", [("cumsum", "mul")], "", "203, 3"),
    "logcumsumexp_middle": ("x = torch.logcumsumexp(x, dim=1)", [("logcumsumexp",)], "", "2, 301"),
    # reversed: each split's total, the splits carried from the line's end
    "cumprod_reversed_leading": ("x = torch.flip(torch.cumprod(torch.flip(1.0 + 0.05 * torch.tanh(x), [0]), dim=0), [0])",
                                 [("tanh", "mul", "add", "cumprod")], "", "203, 3"),
    # exclusive: entry r - 1 read at r across the splits' boundaries
    "cumsum_exclusive_leading": ("f = x * 2.0\nx = torch.cumsum(torch.cat([torch.zeros_like(f[:1]), f[:-1]]), dim=0)",
                                 [("mul", "cumsum")], "", "203, 3"),
    # a split line read through a slice (entries 3.. of each row)
    "softmax_of_slice_split": ("x = torch.softmax(x[:, 3:] * 2.0, dim=1)", [("mul", "softmax")], "", "3, 300"),
    "amax_whole": ("x = torch.amax(x, dim=(0, 1)) + 1.0", [("max", "add")], "", "40, 51"),
    "softmax_last": ("x = torch.softmax(torch.tanh(x) * 3.0, dim=-1) + 1.0", [("tanh", "mul", "softmax", "add")], "", "2, 333"),
    "mean_middle": ("x = x.mean(dim=1) - 1.0", [("mean", "sub")], "", "2, 211, 3"),
    # dimensions apart, split: each kept position's reduced entries walked at their strides
    "logsumexp_apart": ("x = torch.logsumexp(x * self.s, dim=(0, 2))", [("mul", "logsumexp")],
                        "self.s = nn.Parameter(torch.randn(3, 1))", "17, 3, 19"),
    "mean_apart_three": ("x = x.mean((0, 2, 3)) + 1.0", [("mean", "add")], "", "3, 2, 11, 9"),
    # no dimension named: the whole tensor's (a 0-d output; argmax's index into it flattened)
    "sum_no_dim": ("x = torch.sum(torch.tanh(x)) * 2.0", [("tanh", "sum", "mul")], "", "23, 31"),
    "argmax_no_dim": ("x = torch.argmax(torch.tanh(x) * 3.0)", [("tanh", "mul", "argmax")], "", "23, 31"),
    "max_no_dim": ("x = torch.max(x * 2.0) - 1.0", [("mul", "max", "sub")], "", "23, 31"),
    "std_no_dim_kept": ("x = torch.std(x * 2.0 + 10.0, keepdim=True) * 2.0", [("mul", "add", "std", "mul")], "",
                        "23, 31"),
}


def _judged_split(tmp_path, monkeypatch, name, forward, parts, init, shape, dtype="float32"):
    from loopwise.kernels.expert.partition.records import RowOp

    monkeypatch.setattr(RowOp, "FEWEST_PROGRAMS", 4)  # the thresholds, lowered: split small tensors
    monkeypatch.setattr(RowOp, "LONGEST_WALK", 256)
    path = _problem(tmp_path, name, init, forward, f"torch.randn({shape}, dtype=DTYPE)", dtype)
    chosen = plan(capture(load_problem(str(path))), "graph_norm")
    assert [n.ops for n in chosen["norms"]] == parts and not chosen["groups"] and chosen["pytorch"] == ()

    def split_only(source):  # the candidate fails unless its launcher splits the dimension
        marked = source.replace("    wide = max(", "    assert splits > 1, splits\n    wide = max(")
        assert marked != source
        return marked

    judged_correct(path, {"template": "graph_norm", "block": 64}, tmp_path, monkeypatch, edit=split_only)


@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_a_long_reduced_dimension_is_split_among_programs_and_merged(tmp_path, monkeypatch, name):
    """Few programs each walking a long reduced dimension: the dimension is split among programs,
    each split's partial results stored and merged by a second launch (a softmax's logsumexp, a
    std's count / mean / squared deviations); judged correct."""
    _judged_split(tmp_path, monkeypatch, name, *SPLIT_CASES[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_SPLIT_CASES))
def test_more_split_row_operations_are_judged_correct(tmp_path, monkeypatch, name):
    """argmax with ties across splits, scans carried across splits, a maximum over the whole tensor,
    a softmax over the last dimension, a mean over a middle one, reductions over dimensions apart,
    and reductions naming no dimension (sum, argmax, max, std), each split and merged."""
    _judged_split(tmp_path, monkeypatch, name, *SLOW_SPLIT_CASES[name])


@pytest.mark.slow
def test_a_half_precision_split_reduction(tmp_path, monkeypatch):
    """An fp16 sum split among programs: partial results in fp32, the store in fp16."""
    _judged_split(tmp_path, monkeypatch, "half_split", "x = torch.sum(torch.relu(x), dim=0) * 0.5",
                  [("relu", "sum", "mul")], "", "301, 5", "float16")


@pytest.mark.parametrize("forward,shape,dtype", [
    ("x = torch.log_softmax(x * 2.0, dim=0) + 1.0", "65536, 512", "float32"),
    ("x = torch.argmax(x * 2.0, dim=0)", "1048576, 3", "bfloat16"),
    ("x = torch.cumsum(x * 2.0, dim=0) + 1.0", "65536, 64", "float32"),
    ("x = torch.flip(torch.cumsum(torch.flip(x * 2.0, [0]), dim=0), [0]) + 1.0", "65536, 64", "float32"),
    ("x = torch.sum(x * 2.0, dim=(0, 2)) + 1.0", "4096, 8, 1024", "float32"),
])
def test_split_row_parts_compile_for_hopper_at_real_sizes(tmp_path, forward, shape, dtype):
    """Long reduced dimensions at realistic sizes (no threshold lowered): both launches of the split
    part (partial results, then the merge) compile for sm_90a without spills."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert import generate
    from loopwise.kernels.expert.aot import compile_for_hopper

    path = _problem(tmp_path, "split_aot", "", forward, f"torch.randn({shape}, dtype=DTYPE)", dtype)
    problem = load_problem(str(path))
    source, pattern = generate(problem, {"template": "graph_norm"})
    assert source is not None, pattern.reason
    for pick in (0, 1):
        report = compile_for_hopper(source, problem, "rowop_0_kernel", pick)
        assert report["registers"] > 0 and report["spill_bytes"] == 0
