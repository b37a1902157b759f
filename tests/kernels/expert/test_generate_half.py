"""Half-precision (fp16 / bf16) elementwise chains and partitioned groups: read in their own type,
computed in fp32 inside the kernel, stored in the dtype PyTorch's type promotion gives the output;
judged correct in Triton's CPU interpreter and compiled ahead of time for Hopper."""

import pytest

from loopwise.kernels.expert import capture, generate
from loopwise.kernels.expert.generate import variants
from loopwise.kernels.expert.partition import plan
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct  # noqa: E402 - tests/kernels/expert on sys.path


CHAIN = ("x = x * 0.5 + 0.25\nx = x / (1.0 + torch.abs(self.w))\nx = torch.tanh(x) * self.b\nx = F.silu(x)")
MATH = ("x = torch.sin(x) + torch.cos(x * 0.5)\nx = torch.erf(x) * torch.rsqrt(x * x + 1.0)\n"
        "x = torch.log1p(torch.abs(x)) - torch.expm1(x * 0.1)\nx = torch.reciprocal(x + 4.0) + torch.square(x).sin()")
CHAIN_INIT = "self.w = nn.Parameter(torch.randn(37))\nself.register_buffer('b', torch.randn(5, 1))\nself.to(DTYPE)"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_elementwise_chain_is_judged_correct(tmp_path, monkeypatch, dtype):
    """A chain over an input and the model's own parameter and buffer, all in ``dtype`` (the
    generated suite's ``self.to(DTYPE)``): one fused pass that upcasts what it loads, computes in
    fp32 and writes the output in ``dtype``; a ragged last block."""
    path = _problem(tmp_path, "chain", CHAIN_INIT, CHAIN, "torch.randn(3, 5, 37, dtype=DTYPE)", dtype)
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "elementwise", pattern.reason
    assert pattern.operands == ("w", "b")
    source = judged_correct(path, {"block": 256}, tmp_path, monkeypatch)
    assert ".to(tl.float32)" in source and "out_ptr.dtype.element_ty" in source
    assert f"dtype=torch.{dtype}" in source


def test_mixed_precision_inputs_store_the_promoted_dtype(tmp_path, monkeypatch):
    """An fp16 input with a float32 parameter of the same rank promotes to float32 in PyTorch: the
    fused pass stores float32 (the judge compares dtypes); a bf16 parameter against fp16 inputs
    promotes to float32 as well."""
    for init in ("self.w = nn.Parameter(torch.randn(37))",
                 "self.w = nn.Parameter(torch.randn(37, dtype=torch.bfloat16))"):
        path = _problem(tmp_path, f"mixed{len(init)}", init, "x = torch.sigmoid(x * self.w) + 1.0",
                        "torch.randn(6, 37, dtype=DTYPE)", "float16")
        assert capture(load_problem(str(path))).kind == "elementwise"
        source = judged_correct(path, {"block": 64}, tmp_path, monkeypatch)
        assert "dtype=torch.float32" in source


def test_float32_chains_are_written_as_before(tmp_path):
    """The fp32 path reads and writes without casts (its arithmetic is fp32 already)."""
    path = _problem(tmp_path, "chain", CHAIN_INIT, CHAIN, "torch.randn(3, 5, 37, dtype=DTYPE)", "float32")
    source, pattern = generate(load_problem(str(path)))
    assert pattern.kind == "elementwise"
    assert ".to(tl.float32)" not in source and "element_ty" not in source and "torch.empty_like(x" in source


def test_double_inputs_are_refused_with_the_reason(tmp_path):
    """float64 would lose precision through an fp32 kernel: no template, and the reason says why."""
    path = _problem(tmp_path, "chain", "", "x = torch.relu(x) * 2.0", "torch.randn(4, 8, dtype=DTYPE)", "float64")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "unsupported" and "float64" in pattern.reason, pattern.reason


LINEAR = ("x = torch.clamp(x, -1.5, 1.5) * 2.0\nx = self.fc(x)\nx = F.softsign(x) + self.shift")
LINEAR_INIT = "self.fc = nn.Linear(45, 24)\nself.shift = nn.Parameter(torch.randn(24))\nself.to(DTYPE)"
REDUCE = "x = torch.sigmoid(x) * 1.5 - 0.5\nx = torch.amax(x, dim=1)\nx = torch.relu(x - 0.25) * 2.0"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("forward,init,inputs,pytorch", [
    (LINEAR, LINEAR_INIT, "torch.randn(33, 45, dtype=DTYPE)", ("Linear",)),
    (REDUCE, "", "torch.randn(7, 19, 13, dtype=DTYPE)", ("amax",)),
], ids=["linear", "reduction"])
def test_half_precision_groups_next_to_a_gemm_or_a_reduction_are_judged_correct(tmp_path, monkeypatch, dtype,
                                                                               forward, init, inputs, pytorch):
    """A Linear or a reduction stays in PyTorch (in ``dtype``); the elementwise work before and after
    it is two fused passes in ``dtype``, judged correct against the reference."""
    path = _problem(tmp_path, "graph", init, forward, inputs, dtype)
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "graph", pattern.reason
    chosen = plan(pattern, "graph")
    assert chosen["pytorch"] == pytorch and len(chosen["groups"]) == 2
    source = judged_correct(path, {"block": 128}, tmp_path, monkeypatch)
    assert source.count("out_ptr.dtype.element_ty") == 2


@pytest.mark.parametrize("dtype,forward,init,inputs,kind", [
    ("float16", CHAIN, CHAIN_INIT, "torch.randn(4096, 5, 37, dtype=DTYPE)", "elementwise"),
    ("bfloat16", "x = torch.sigmoid(x) * 1.5 - 0.5\nx = torch.amax(x, dim=1)", "", "torch.randn(64, 1024, 33, dtype=DTYPE)",
     "graph"),
    ("bfloat16", MATH, "", "torch.randn(4096, 300, dtype=DTYPE)", "elementwise"),
], ids=["fp16_chain", "bf16_group", "bf16_math"])
def test_half_precision_passes_compile_for_hopper_without_a_gpu(tmp_path, dtype, forward, init, inputs, kind):
    """The fp16 chain's pass and a bf16 partitioned group's pass (the reduction after it in PyTorch)
    compile for sm_90 with the arguments their launch gives them, without spills (Triton's
    interpreter runs neither the GPU compiler nor its type rules)."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert.aot import compile_for_hopper, launch

    problem = load_problem(str(_problem(tmp_path, "aot", init, forward, inputs, dtype)))
    source, pattern = generate(problem)
    assert pattern.kind == kind, pattern.reason
    _, args, _ = launch(source, problem)
    assert str(args[0].dtype) == f"torch.{dtype}"
    assert compile_for_hopper(source, problem)["spill_bytes"] == 0


@pytest.mark.parametrize("dtype,forward,moves", [
    ("float16", "x = torch.softmax(x, dim=-1)", {"block": 64}),  # online: three blocks a row
    ("bfloat16", "x = F.log_softmax(x, dim=1)", {"block": 256}),  # one block a row
])
def test_a_half_precision_row_softmax_is_judged_correct(tmp_path, monkeypatch, dtype, forward, moves):
    """Softmax and log-softmax over the last dimension of an fp16 / bf16 input: the row kernel reads
    it upcast to fp32 (max, sum and exponentials in fp32, as PyTorch computes them) and stores the
    input's dtype."""
    path = _problem(tmp_path, "softmax", "", forward, "torch.randn(9, 150, dtype=DTYPE) * 4", dtype)
    assert capture(load_problem(str(path))).kind == "row_softmax"
    source = judged_correct(path, moves, tmp_path, monkeypatch)
    assert ".to(tl.float32)" in source and "out_ptr.dtype.element_ty" in source



@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_math_functions_are_fused_and_judged_correct(tmp_path, monkeypatch, dtype):
    """sin, cos, erf, rsqrt, log1p, expm1, reciprocal and square (functions and methods) are
    statements of a fused pass: fp32-accurate under the strict tolerance (log1p and expm1 near 0
    without cancelling), and in bf16."""
    path = _problem(tmp_path, "math", "", MATH, "torch.randn(7, 300, dtype=DTYPE) * 2", dtype)
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "elementwise", pattern.reason
    assert {"sin", "cos", "erf", "rsqrt", "log1p", "expm1", "reciprocal", "square"} <= set(pattern.ops)
    judged_correct(path, {"block": 512}, tmp_path, monkeypatch)


def test_a_half_precision_value_pytorch_also_reads_is_loaded_not_recomputed(tmp_path, monkeypatch):
    """``a`` is read by a cummax left in PyTorch (which sees it rounded to fp16) and by the pass
    after it: recomputed unrounded there, ``cummax(a) - a`` would be a rounding error instead of
    0 where ``a`` is the running maximum (a chain of cumulative sums minus their inputs in bf16
    came out 10x further from float64 than the reference so). The later pass loads the fp16 ``a``
    as PyTorch has it, and is judged correct."""
    forward = "a = x * 3.0 + 1.0\nc = torch.cummax(a, dim=1).values\nx = (c - a) * 100.0 + torch.tanh(a)"
    path = _problem(tmp_path, "reread", "", forward, "torch.rand(16, 200, dtype=DTYPE) + 1.0", "float16")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "graph", pattern.reason
    groups = plan(pattern, "graph")["groups"]
    assert [g.ops for g in groups] == [("mul", "add"), ("sub", "mul", "tanh", "add")]
    judged_correct(path, {"block": 256}, tmp_path, monkeypatch)


EPILOGUE = "x = self.fc(x)\nx = F.gelu(x) * self.scale + 0.5"
EPILOGUE_INIT = "self.fc = nn.Linear(72, 40)\nself.scale = nn.Parameter(torch.rand(40) + 0.5)\nself.to(DTYPE)"


@pytest.mark.parametrize("moves", [{"template": "graph_linear", "tile": 32, "chunk": 16},
                                   {"template": "graph_linear", "cublas": 1, "block": 256}], ids=["triton", "cublas"])
def test_an_fp16_linear_with_its_epilogue_is_a_gemm_plan_judged_correct(tmp_path, monkeypatch, moves):
    """An fp16 nn.Linear followed by elementwise work on its output: the graph_linear plan's GEMM
    reads fp16 on the tensor cores, sums in fp32, applies the bias and the epilogue to the fp32 tile
    and stores fp16; with the cublas move the product is cuBLAS's and the epilogue one pass in place."""
    path = _problem(tmp_path, "gemm", EPILOGUE_INIT, EPILOGUE, "torch.randn(50, 72, dtype=DTYPE)", "float16")
    pattern = capture(load_problem(str(path)))
    assert "graph_linear" in variants(pattern), pattern.reason
    (gemm,) = plan(pattern, "graph_linear")["gemms"]
    assert gemm.ops == ("linear", "gelu", "mul", "add") and gemm.dtype == "float16"
    source = judged_correct(path, moves, tmp_path, monkeypatch)
    assert "out_ptr.dtype.element_ty" in source or "y_ptr.dtype.element_ty" in source


def test_a_bf16_linear_gemm_compiles_to_wgmma_for_hopper(tmp_path):
    """The bf16 GEMM with its epilogue, at a size of the generated suite, compiled for sm_90 as its
    launch specialises it: on Hopper's warp-group MMA, without spills (Triton's interpreter
    multiplies bf16 tiles wrongly, so bf16 products are judged on a GPU only)."""
    pytest.importorskip("triton")
    from loopwise.kernels.expert.aot import compile_for_hopper
    from loopwise.kernels.expert.generate import render

    init = EPILOGUE_INIT.replace("nn.Linear(72, 40)", "nn.Linear(1024, 2048)").replace("torch.rand(40)", "torch.rand(2048)")
    problem = load_problem(str(_problem(tmp_path, "gemm_aot", init, EPILOGUE, "torch.randn(8192, 1024, dtype=DTYPE)",
                                        "bfloat16")))
    source = render(capture(problem), {"template": "graph_linear"})
    compiled = compile_for_hopper(source, problem)
    assert compiled["wgmma"] and compiled["spill_bytes"] == 0, compiled


def test_a_partition_whose_only_plan_is_its_gemms_is_generated_without_naming_it(tmp_path):
    """Linear -> ELU -> Linear in bf16: one operation between the GEMMs is no pass of its own, so the
    only plan is graph_linear (the ELU the first GEMM's epilogue); generate() without moves writes
    that plan rather than the missing elementwise one."""
    init = "self.fc1 = nn.Linear(64, 48)\nself.fc2 = nn.Linear(48, 32)\nself.to(DTYPE)"
    path = _problem(tmp_path, "mlp", init, "x = self.fc2(F.elu(self.fc1(x)))", "torch.randn(40, 64, dtype=DTYPE)",
                    "bfloat16")
    source, pattern = generate(load_problem(str(path)))
    assert variants(pattern) == ["graph_linear"]
    assert source.startswith('"""graph_linear:') and "def linear_1_kernel" in source


def test_a_group_that_promotes_half_to_float32_stores_float32(tmp_path, monkeypatch):
    """An fp16 Linear's output times a float32 parameter is float32 in PyTorch: the pass after the
    Linear reads fp16 and fp32, and stores float32 (so the GEMM plan leaves it a pass of its own)."""
    init = "self.fc = nn.Linear(45, 24)\nself.to(DTYPE)\nself.w = nn.Parameter(torch.randn(24))"
    path = _problem(tmp_path, "promote", init, "x = torch.relu(self.fc(x)) * self.w + 1.0",
                    "torch.randn(33, 45, dtype=DTYPE)", "float16")
    pattern = capture(load_problem(str(path)))
    (group,) = plan(pattern, "graph")["groups"]
    assert group.upcast and group.out_dtype == "float32"
    (gemm,) = plan(pattern, "graph_linear")["gemms"]
    assert gemm.ops == ("linear",) and len(plan(pattern, "graph_linear")["groups"]) == 1
    source = judged_correct(path, {"block": 64}, tmp_path, monkeypatch)
    assert "dtype=torch.float32" in source
