"""Gathers in partitioned passes: embedding lookups, index_select, ``x[idx]`` and torch.gather read
through their integer index inside the fused pass, with the elementwise work on the table before
and on the gathered values after; flatten / view / reshape between fused operations as pure
relabelings; permutes read through, their copy done by the pass's store. Judged correct in
Triton's CPU interpreter, compiled ahead of time for Hopper."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.partition import plan
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct  # noqa: E402 - tests/kernels/expert on sys.path


def _graph_ops(path) -> tuple:
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "graph", pattern.reason
    return tuple(op for g in plan(pattern, "graph")["groups"] for op in g.ops), plan(pattern, "graph")["pytorch"]


EMBEDDING = ("self.emb = nn.Embedding(50, 24)\nself.b = nn.Parameter(torch.randn(24))\nself.to(DTYPE)",
             "x = self.emb(ids)\nx = F.gelu(x) * self.b + 1.0", "torch.randint(0, 50, (5, 7))")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_embedding_lookup_with_elementwise_work_after_is_one_pass(tmp_path, monkeypatch, dtype):
    """nn.Embedding on an int64 input, then GELU, a per-feature scale and a shift: one pass that
    reads each token's row through its index (the integer input no longer refuses the problem);
    840 outputs in blocks of 256, the last ragged."""
    init, forward, inputs = EMBEDDING
    path = _problem(tmp_path, "emb", init, forward, inputs, dtype, args="ids")
    ops, pytorch = _graph_ops(path)
    assert ops == ("embedding", "gelu", "mul", "add") and pytorch == ()
    source = judged_correct(path, {"block": 256}, tmp_path, monkeypatch)
    assert "o0 = ((offsets // g0_span)" in source


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_index_select_on_dim_0_fuses_the_table_work_before_and_the_work_after(tmp_path, monkeypatch, dtype):
    """tanh and a per-column scale on the table, index_select of rows (repeats, fewer and more
    rows than the table has) by a buffer, then ReLU: the table work is computed at the gathered
    positions, the per-column scale broadcast against the table's shape."""
    init = ("self.register_buffer('idx', torch.tensor([3, 0, 12, 3, 7, 7, 1, 9, 12, 2, 5, 11, 4, 6, 0, 8]))\n"
            "self.s = nn.Parameter(torch.randn(5))\nself.to(DTYPE)")
    forward = "x = torch.tanh(x) * self.s\nx = torch.index_select(x, 0, self.idx)\nx = torch.relu(x) - 0.25"
    path = _problem(tmp_path, "isel0", init, forward, "torch.randn(13, 6, 5, dtype=DTYPE)", dtype)
    ops, _ = _graph_ops(path)
    assert ops == ("tanh", "mul", "index_select", "relu", "sub")
    judged_correct(path, {"block": 128}, tmp_path, monkeypatch)


def test_index_select_on_a_middle_dim_and_x_idx_indexing_are_judged_correct(tmp_path, monkeypatch):
    """index_select of dim 1 of a 3-D tensor, and ``x[idx]`` with a 2-D index input (the output
    takes the index's shape in place of dim 0), each with work after."""
    init = "self.register_buffer('idx', torch.tensor([10, 0, 4, 4, 9, 2, 7]))"
    forward = "x = torch.index_select(x * 2.0, 1, self.idx)\nx = torch.sigmoid(x) + x"
    path = _problem(tmp_path, "isel1", init, forward, "torch.randn(4, 11, 6, dtype=DTYPE)")
    assert _graph_ops(path)[0] == ("mul", "index_select", "sigmoid", "add")
    judged_correct(path, {"block": 64}, tmp_path, monkeypatch)
    forward = "x = torch.abs(x)[idx]\nx = torch.sqrt(x) * 3.0"
    path = _problem(tmp_path, "getitem", "", forward, "torch.randn(20, 8, dtype=DTYPE), torch.randint(0, 20, (3, 5))",
                    args="x, idx")
    assert _graph_ops(path)[0] == ("abs", "index", "sqrt", "mul")
    judged_correct(path, {"block": 64}, tmp_path, monkeypatch)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gather_along_the_last_dim_is_judged_correct(tmp_path, monkeypatch, dtype):
    """torch.gather along dim -1 with an index input of fewer columns, exp and a scale after."""
    forward = "x = torch.gather(x, -1, idx)\nx = torch.exp(x) * 0.5"
    path = _problem(tmp_path, "gather", "", forward,
                    "torch.randn(6, 10, dtype=DTYPE), torch.randint(0, 10, (6, 4))", dtype, args="x, idx")
    assert _graph_ops(path)[0] == ("gather", "exp", "mul")
    judged_correct(path, {"block": 16}, tmp_path, monkeypatch)


def test_flatten_inside_an_elementwise_chain_stays_one_pass(tmp_path, monkeypatch):
    """ReLU, flatten of the last two dims, a parameter over the flattened dim, sigmoid, a view
    back: one pass, the parameter broadcast against the flattened shape."""
    init = "self.w = nn.Parameter(torch.randn(60))"
    forward = ("x = torch.relu(x) + 0.5\nx = torch.flatten(x, 1, 2)\nx = torch.sigmoid(x * self.w)\n"
               "x = x.view(4, 6, 10).contiguous()\nx = x - 1.0")
    path = _problem(tmp_path, "flat", init, forward, "torch.randn(4, 6, 10, dtype=DTYPE)")
    ops, pytorch = _graph_ops(path)
    assert ops == ("relu", "add", "mul", "sigmoid", "sub") and pytorch == ()
    judged_correct(path, {"block": 128}, tmp_path, monkeypatch)


def test_a_view_after_the_last_operation_stays_a_view_so_the_work_is_still_an_epilogue(tmp_path):
    """ReLU and a scale after a Linear, then a view: the view stays in PyTorch (free), so the work
    before it is still the GEMM's epilogue in the Linear plan."""
    path = _problem(tmp_path, "linview", "self.fc = nn.Linear(16, 32)", "x = torch.relu(self.fc(x)) * 2.0\nx = x.view(4, 8, 4)",
                    "torch.randn(4, 16, dtype=DTYPE)")
    pattern = capture(load_problem(str(path)))
    assert [g.ops for g in plan(pattern, "graph_linear")["gemms"]] == [("linear", "relu", "mul")]
    assert plan(pattern, "graph_linear")["pytorch"] == ("view",)


def test_chained_gathers_across_a_flatten_are_one_pass(tmp_path, monkeypatch):
    """tanh, flatten, index_select, index_select, gather by an input: every gather in one pass,
    each reading the next one's index through its own (the generated suite's chains)."""
    init = ("self.register_buffer('i1', torch.arange(30) * 7 % 24)\n"
            "self.register_buffer('i2', torch.arange(20) * 11 % 30)")
    forward = ("x = torch.tanh(x)\nx = torch.flatten(x, 0, 1)\nx = torch.index_select(x, 0, self.i1)\n"
               "x = torch.index_select(x, 0, self.i2)\nx = torch.gather(x, 1, idx)")
    path = _problem(tmp_path, "chain", init, forward, "torch.randn(4, 6, 9, dtype=DTYPE), torch.randint(0, 9, (20, 9))",
                    args="x, idx")
    assert _graph_ops(path)[0] == ("tanh", "index_select", "index_select", "gather")
    judged_correct(path, {"block": 64}, tmp_path, monkeypatch)


def test_table_work_read_elsewhere_too_is_written_once_and_gathered_from_memory(tmp_path, monkeypatch):
    """The table's tanh and scale are also added to the gathered rows: computed at two sets of
    positions, so they are a pass of their own, written once, and the second pass gathers from it
    (and recomputes them where it reads them unshuffled)."""
    init = "self.register_buffer('perm', torch.tensor([4, 0, 3, 1, 2, 2]))"
    forward = "y = torch.tanh(x) * 2.0\nx = torch.index_select(y, 0, self.perm) + y\nx = torch.relu(x)"
    path = _problem(tmp_path, "shared", init, forward, "torch.randn(6, 7, dtype=DTYPE)")
    pattern = capture(load_problem(str(path)))
    assert [g.ops for g in plan(pattern, "graph")["groups"]] == [("tanh", "mul"), ("tanh", "mul", "index_select", "add", "relu")]
    judged_correct(path, {"block": 32}, tmp_path, monkeypatch)


def test_table_work_a_gather_would_repeat_many_times_per_element_is_written_once(tmp_path, monkeypatch):
    """30 rows gathered from a table of 5: computing the table's tanh and scale at every gathered
    position would repeat them 6 times per element, so they are a pass of their own."""
    init = "self.register_buffer('idx', torch.arange(30) * 3 % 5)"
    forward = "x = torch.tanh(x) * 2.0\nx = torch.index_select(x, 0, self.idx)\nx = torch.relu(x) + 1.0"
    path = _problem(tmp_path, "repeat", init, forward, "torch.randn(5, 4, dtype=DTYPE)")
    pattern = capture(load_problem(str(path)))
    assert [g.ops for g in plan(pattern, "graph")["groups"]] == [("tanh", "mul"), ("index_select", "relu", "add")]
    judged_correct(path, {"block": 64}, tmp_path, monkeypatch)


def test_a_lone_gather_that_is_the_whole_forward_is_a_pass_of_its_own(tmp_path, monkeypatch):
    """index_select alone: nothing else stays in PyTorch, so the one pass replaces the one kernel."""
    init = "self.register_buffer('idx', torch.arange(9) * 5 % 12)"
    path = _problem(tmp_path, "alone", init, "x = torch.index_select(x, 1, self.idx)", "torch.randn(3, 12, dtype=DTYPE)")
    assert _graph_ops(path) == (("index_select",), ())
    judged_correct(path, {"block": 32}, tmp_path, monkeypatch)


def test_an_embedding_that_renormalizes_its_table_stays_in_pytorch_and_says_why(tmp_path):
    """max_norm rewrites the table in place on every lookup: not a pure gather, left to PyTorch,
    and the one-line reason says so."""
    path = _problem(tmp_path, "maxnorm", "self.emb = nn.Embedding(50, 24, max_norm=1.0)",
                    "x = self.emb(ids)\nx = torch.relu(x)", "torch.randint(0, 50, (5, 7))", args="ids")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "unsupported"
    assert "max_norm" in pattern.reason and "\n" not in pattern.reason


def test_the_gather_pass_compiles_for_hopper_without_a_gpu(tmp_path):
    """The embedding pass in bf16 and the chained gathers in fp32 build for sm_90 without spills."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert import generate
    from loopwise.kernels.expert.aot import compile_for_hopper

    init, forward, inputs = EMBEDDING
    path = _problem(tmp_path, "emb_aot", init, forward, "torch.randint(0, 50, (64, 128))", "bfloat16", args="ids")
    problem = load_problem(str(path))
    source, _ = generate(problem)
    report = compile_for_hopper(source, problem)
    assert "tl.load(x0_ptr + (offsets // g0_inner) % g0_count" in source
    assert report["registers"] > 0 and report["spill_bytes"] == 0
    init = "self.register_buffer('i1', torch.arange(3000) * 7 % 2400)\nself.register_buffer('i2', torch.arange(2000) * 11 % 3000)"
    forward = ("x = torch.tanh(x)\nx = torch.flatten(x, 0, 1)\nx = torch.index_select(x, 0, self.i1)\n"
               "x = torch.index_select(x, 0, self.i2)\nx = torch.gather(x, 1, idx)")
    path = _problem(tmp_path, "chain_aot", init, forward, "torch.randn(40, 60, 96), torch.randint(0, 96, (2000, 96))",
                    args="x, idx")
    problem = load_problem(str(path))
    source, _ = generate(problem)
    assert source.count("tl.where(i") == 3  # three gathers, one pass
    report = compile_for_hopper(source, problem)
    assert report["registers"] > 0 and report["spill_bytes"] == 0


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_permute_between_operations_is_read_through_in_the_pass(tmp_path, monkeypatch, dtype):
    """sigmoid and a scale, a view into heads, permute and contiguous (the copy), a shift: one pass
    that reads each output element's source position through the permutation."""
    forward = ("x = torch.sigmoid(x) * 2.0\nx = x.view(2, 5, 3, 4).permute(0, 2, 1, 3).contiguous()\nx = x - 1.0")
    path = _problem(tmp_path, "permute", "", forward, "torch.randn(2, 5, 12, dtype=DTYPE)", dtype)
    ops, pytorch = _graph_ops(path)
    assert ops == ("sigmoid", "mul", "permute", "sub") and pytorch == ()
    judged_correct(path, {"block": 64}, tmp_path, monkeypatch)


def test_a_transposing_copy_after_work_is_the_passs_own_store(tmp_path, monkeypatch):
    """ReLU, then transpose(0, 1).contiguous() as the last step (PyTorch's copy kernel): the pass
    writes its output in the transposed order; a transpose alone as the whole forward is a pass too."""
    path = _problem(tmp_path, "tcopy", "", "x = torch.relu(x) + 1.0\nx = x.transpose(0, 1).contiguous()",
                    "torch.randn(7, 3, 5, dtype=DTYPE)")
    assert _graph_ops(path) == (("relu", "add", "permute"), ())
    judged_correct(path, {"block": 32}, tmp_path, monkeypatch)
    path = _problem(tmp_path, "talone", "", "x = x.transpose(1, 2).contiguous()", "torch.randn(7, 3, 5, dtype=DTYPE)")
    assert _graph_ops(path) == (("permute",), ())
    judged_correct(path, {"block": 32}, tmp_path, monkeypatch)


def test_the_permute_pass_compiles_for_hopper_without_a_gpu(tmp_path):
    pytest.importorskip("triton")
    from loopwise.kernels.expert import generate
    from loopwise.kernels.expert.aot import compile_for_hopper

    forward = ("x = torch.sigmoid(x) * 2.0\nx = x.view(8, 128, 16, 64).permute(0, 2, 1, 3).contiguous()\nx = x - 1.0")
    path = _problem(tmp_path, "permute_aot", "", forward, "torch.randn(8, 128, 1024, dtype=DTYPE)", "bfloat16")
    problem = load_problem(str(path))
    source, _ = generate(problem)
    assert "# permute (0, 2, 1, 3)" in source
    report = compile_for_hopper(source, problem)
    assert report["registers"] > 0 and report["spill_bytes"] == 0


def test_a_permuted_input_read_by_one_operation_is_no_pass_of_its_own(tmp_path):
    """ReLU of a transposed input then a Linear: PyTorch's ReLU reads the transposed view as it is,
    so a pass would save nothing; no Triton part in the elementwise plan."""
    path = _problem(tmp_path, "tview", "self.fc = nn.Linear(7, 4)", "x = self.fc(torch.relu(x.transpose(0, 1)))",
                    "torch.randn(7, 3, dtype=DTYPE)")
    pattern = capture(load_problem(str(path)))
    assert "graph" not in [k for k, _ in dict(pattern.params).get("plans", ())], pattern.reason
