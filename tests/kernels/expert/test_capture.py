"""What the capture recognizes in a problem's forward, and the reason it gives where no template takes it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopwise.kernels.expert import capture, generate
from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.generate import render, variants
from loopwise.kernels.expert.partition import kinds, plan
from loopwise.kernels.expert.proposer import ExpertProposer
from loopwise.kernels.problem import load_problem

from expert_judging import HERE, SDPA, judged_correct, load_candidate, model_source, problem_variant  # noqa: E402 - tests/kernels/expert on sys.path


EXAMPLE = Path(__file__).parents[3] / "loopwise" / "kernels" / "examples" / "scaled_gelu_problem.py"


def test_capture_recognizes_patterns_and_says_why_not():
    chain = capture(load_problem(str(HERE / "chain.py")))
    assert chain.kind == "elementwise" and chain.inputs == 2
    assert {"gelu", "sigmoid", "leaky_relu", "clamp"} <= set(chain.ops)
    assert capture(load_problem(str(HERE / "softmax_rows.py"))).kind == "row_softmax"
    log = capture(load_problem(str(HERE / "log_softmax_rows.py")))
    assert log.kind == "row_softmax" and log.ops == ("log_softmax",) and dict(log.params)["log"] is True
    ln = capture(load_problem(str(HERE / "layernorm.py")))
    assert ln.kind == "layernorm" and dict(ln.params)["n_cols"] == 350
    conv = capture(load_problem(str(HERE / "unsupported_conv.py")))
    assert conv.kind == "unsupported" and "groups=2" in conv.reason  # the implicit GEMM takes groups 1
    epilogue = capture(load_problem(str(HERE / "conv_epilogue.py")))
    assert epilogue.kind == "elementwise" and epilogue.prologue == "conv" and epilogue.operands == ("bias",)
    assert epilogue.ops == ("conv2d", "relu", "add", "mish", "clamp")
    added = capture(load_problem(str(HERE / "convtranspose_add.py")))
    assert added.prologue == "conv_transpose" and added.inputs == 2 and "hardswish" in added.ops


def test_reductions_the_template_does_not_cover_say_why(tmp_path):
    def pattern_of(expr):
        return capture(load_problem(str(problem_variant(tmp_path, "reduce_dim.py",
                                                 {"torch.sum(x, dim=self.dim, keepdim=True)": expr}))))

    apart = pattern_of("torch.sum(x, dim=(0, 2))")  # not this template's: a row part of the partition
    assert apart.kind == "graph" and "row" in {n.kind for n in plan(apart, "graph_norm")["norms"]}
    assert "the 2-norm" in pattern_of("torch.norm(x, p=1, dim=1)").reason
    assert pattern_of("torch.sum(x)").kind == "graph"  # everything: not this template, a row part of the partition
    assert pattern_of("torch.max(x, dim=1)").kind == "unsupported"  # a tuple out


def test_model_parameters_become_operands_with_the_reference_init(tmp_path, monkeypatch):
    """The bundled example's bias is read by the kernel; ModelNew draws it with the reference's own
    __init__ under the judge's seed, so the judge finds the same values (and no reference access)."""
    pattern = capture(load_problem(str(EXAMPLE)))
    assert pattern.kind == "elementwise" and pattern.operands == ("bias",), pattern.reason
    assert pattern.ops == ("add", "gelu_tanh", "mul")
    source = judged_correct(EXAMPLE, {"block": 256}, tmp_path, monkeypatch)
    assert "self.bias = nn.Parameter(torch.randn(cols) * 0.1)" in source
    nchw = capture(load_problem(str(HERE / "bias_nchw.py")))
    assert nchw.operands == ("bias", "gain", "shift") and nchw.constants == (("INIT_SCALE", "0.1"),)
    assert "super(Model" not in nchw.init and "super().__init__()" in nchw.init


@pytest.mark.parametrize("forward,reason", [
    ("return a.unsqueeze(1) * b + a", "more than one shape"),  # a as (37, 1) and as (37,)
    ("return a.unsqueeze(1) + c", "no input has the output's shape"),  # (37, 1) + (129,): neither is (37, 129)
    ("return a.unsqueeze(1)", "a view of an input"),
    ("return b * torch.ones(37, 1, 1)", ""),  # a tensor made in forward: not an elementwise chain
])
def test_inputs_that_broadcast_in_ways_one_index_cannot_follow_are_unsupported(tmp_path, forward, reason):
    path = problem_variant(tmp_path, "broadcast_inputs.py", {"return torch.tanh(a.unsqueeze(1) * b) + c": forward})
    pattern = capture(load_problem(str(path)))
    assert pattern.kind != "elementwise" and reason in pattern.reason, pattern
    # an input whose non-1 dimensions are not one run of the output's: (4, 1, 7) against (2, 4, 5, 7)
    run = problem_variant(tmp_path, "broadcast_inputs.py", {"return torch.tanh(a.unsqueeze(1) * b) + c": "return a * b",
                                                     "[torch.rand(37), torch.randn(37, 129), torch.randn(129)]":
                                                     "[torch.rand(4, 1, 7), torch.randn(2, 4, 5, 7), 1.0]"})
    assert "one contiguous run" in capture(load_problem(str(run))).reason


@pytest.mark.parametrize("loss,reason", [
    ("torch.nn.functional.cross_entropy(predictions, targets, label_smoothing=0.1)", "label_smoothing=0.1"),
    ("torch.nn.functional.cross_entropy(predictions, targets, weight=torch.ones(129))", ""),
    ("torch.nn.functional.cross_entropy(predictions, predictions.softmax(-1))", ""),  # probabilities
])
def test_cross_entropy_forms_the_template_does_not_take_say_so(tmp_path, loss, reason):
    path = problem_variant(tmp_path, "cross_entropy.py", {"torch.nn.functional.cross_entropy(predictions, targets)": loss})
    pattern = capture(load_problem(str(path)))
    assert pattern.kind != "cross_entropy" and reason in pattern.reason, pattern


def test_model_tensors_that_cannot_be_indexed_or_copied_are_unsupported(tmp_path, monkeypatch):
    run = capture(load_problem(str(HERE / "unsupported_broadcast.py")))
    assert run.kind == "unsupported" and "'weight'" in run.reason and "(4, 1, 7)" in run.reason
    # a helper function of the problem's is copied with the __init__ that calls it
    helper = capture(load_problem(str(HERE / "init_helper_function.py")))
    assert helper.kind == "elementwise" and helper.helpers.startswith("def make_bias(n):"), helper.reason
    judged_correct(HERE / "init_helper_function.py", {}, tmp_path / "helper", monkeypatch)
    # A global literal only when loaded here (it depends on the machine) is not copied either.
    computed = (HERE / "bias_nchw.py").read_text().replace(
        "INIT_SCALE = 0.1", "INIT_SCALE = 0.1 if torch.cuda.is_available() else 0.2")
    (tmp_path / "computed_global.py").write_text(computed)
    pattern = capture(load_problem(str(tmp_path / "computed_global.py")))
    assert pattern.kind == "unsupported" and "INIT_SCALE" in pattern.reason


@pytest.mark.parametrize("pshape,div_mod", [((7,), (1, 7)), ((5, 1, 1), (42, 5)), ((1, 5, 1, 1), (42, 5)),
                                            ((6, 7), (1, 42)), ((4, 5, 6, 7), (1, 840)), ((1,), (1, 1)),
                                            ((), (1, 1)), ((5, 6, 1), (7, 30)), ((5, 1, 7), None),
                                            ((3,), None), ((1, 1, 1, 1, 7), None)])
def test_broadcast_index_at_capture_and_in_the_generated_forward_agree(tmp_path, pshape, div_mod):
    """The rule capture checks is the rule the generated forward applies to the actual shapes, and
    (o // div) % mod is the element numpy broadcasting gives."""
    import torch

    shape = (4, 5, 6, 7)
    assert ew.broadcast_run(shape, pshape) == div_mod
    source, _ = generate(load_problem(str(HERE / "bias_nchw.py")))
    module = load_candidate(source, tmp_path, "bias_nchw_index")
    if div_mod is None:
        with pytest.raises(ValueError):
            module.broadcast_index(shape, pshape)
        return
    assert module.broadcast_index(torch.Size(shape), torch.Size(pshape)) == div_mod
    p = torch.arange(float(max(1, torch.Size(pshape).numel()))).reshape(pshape)
    flat = torch.arange(torch.Size(shape).numel())
    assert torch.equal(p.reshape(-1)[(flat // div_mod[0]) % div_mod[1]], (torch.zeros(shape) + p).reshape(-1))


def test_a_recurrent_layer_is_named_as_the_reason_not_its_inputs_shapes(tmp_path):
    """KernelBench's LSTM and GRU problems (L3/36, 3/41) pass the input and the hidden states, of
    shapes that do not broadcast together: where the recurrent kernels do not compute the layer
    (dropout between layers), the reason a user reads is the layer's, not a broadcasting error."""
    path = tmp_path / "gru.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def __init__(self):\n        super().__init__()\n        self.gru = nn.GRU(8, 16, 2, dropout=0.5)\n\n"
                    "    def forward(self, x, h0):\n        output, h_n = self.gru(x, h0)\n        return output\n\n\n"
                    "def get_inputs():\n    return [torch.rand(5, 3, 8), torch.rand(2, 3, 16)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "unsupported" and pattern.reason.startswith("GRU with dropout=0.5"), pattern.reason
    assert "broadcast" not in pattern.reason, pattern.reason


def test_an_operation_with_a_string_argument_is_named_as_the_reason_not_its_string(tmp_path):
    """``torch.einsum("ij,ij->i", x, self.w)`` (row-wise dots, no GEMM with the model's matrix) is
    an operation no elementwise pass expresses: the reason names the operation and why the equation
    is no GEMM, not the equation as a "non-numeric constant"."""
    path = tmp_path / "einsum.py"
    path.write_text(model_source("self.w = nn.Parameter(torch.randn(6, 9))", 'return torch.einsum("ij,ij->i", x, self.w)',
                                 shape="6, 9"))
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "unsupported" and pattern.reason.startswith("operation einsum"), pattern.reason
    assert "einsum 'ij,ij->i': the 2-D weight is not one summed dimension and one output column" in pattern.reason
    assert "non-numeric" not in pattern.reason, pattern.reason


def test_parameters_the_inputs_leave_out_are_captured_at_their_defaults(tmp_path):
    """KernelBench's LSTM and NetVLAD forwards take ``h0=None`` / ``mask=None`` beyond their
    inputs: the forward is captured as the call makes it (the defaults' branch), not as an FX trace
    of the other branch, and a parameter with no default is a clear reason, never a traceback."""
    cases = {"none": ("scale=None", "y = self.conv(x)\nreturn y if scale is None else y * scale"),
             "flag": ("relu=True, slope=0.5", "y = self.conv(x)\nreturn torch.relu(y) * slope if relu else y"),
             "required": ("scale", "return self.conv(x) * scale")}
    patterns = {}
    for name, (params, body) in cases.items():
        path = tmp_path / f"{name}.py"
        path.write_text(model_source("self.conv = nn.Conv2d(3, 8, 3)", body, params=params))
        patterns[name] = capture(load_problem(str(path)))
    assert patterns["none"].kind == "conv2d"  # the call's graph is one convolution (the traced else-branch multiplied)
    flag = patterns["flag"]  # FX's guards on the fixed values are gone: the conv in cuDNN, ReLU and the scale fused
    assert (flag.kind, flag.ops, flag.prologue, flag.inputs) == ("elementwise", ("conv2d", "relu", "mul"), "conv", 1), flag
    assert patterns["required"].kind == "unsupported"
    assert "forward takes scale beyond the 1 input(s) given, without defaults" in patterns["required"].reason


@pytest.mark.parametrize("body,draws", [
    ("h = torch.randn((x.shape[0], 8, 7, 7), device=x.device)\nreturn self.conv(x) + h", "randn"),
    ("return torch.nn.functional.dropout(self.conv(x), 0.2)", "dropout"),
    ("return self.conv(x).normal_()", "Tensor.normal_"),
    ("return torch.nn.functional.dropout(self.conv(x), 0.2, False) * 2", None),  # eval-mode dropout: the identity
])
def test_a_forward_that_draws_random_numbers_gets_no_candidate(tmp_path, body, draws):
    """KernelBench L3/35 draws its LSTM's initial state with torch.randn in the forward when h0 is
    None (as the inputs leave it): its output differs from call to call, so every candidate would
    fail the judge's comparison; the capture says so instead of proposing any."""
    path = tmp_path / "random.py"
    path.write_text(model_source("self.conv = nn.Conv2d(3, 8, 3)", body, params="unused=None"))
    pattern = capture(load_problem(str(path)))
    if draws is None:
        assert pattern.kind != "unsupported", pattern.reason
        return
    assert pattern.kind == "unsupported"
    assert f"the forward draws random numbers ({draws}): the output is random" in pattern.reason, pattern.reason


def test_attention_the_template_cannot_take_is_left_to_pytorch_with_the_reason(tmp_path):
    dropped = problem_variant(tmp_path, "attention.py", {SDPA: "F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)"})
    pattern = capture(load_problem(str(dropped)))
    assert pattern.kind != "attention" and "dropout" in pattern.reason


def test_conv3d_the_template_does_not_take_says_why(tmp_path):
    grouped = capture(load_problem(str(problem_variant(tmp_path, "conv3d.py", {
        "dilation=dilation, bias=bias)": "dilation=dilation, bias=bias, groups=3)",
        "[3, 20,": "[3, 21,"}))))
    assert grouped.kind == "unsupported" and "Conv3d with groups=3" in grouped.reason
    assert variants(grouped) == []
    from loopwise.core.propose import ProposalFailure, ProposalRequest

    proposals = ExpertProposer(load_problem(str(tmp_path / "variant_conv3d.py"))).propose(ProposalRequest(task="", n=2))
    assert all(isinstance(p, ProposalFailure) and "groups=3" in p.detail for p in proposals)


def test_only_a_depthwise_then_pointwise_pair_is_a_separable_convolution(tmp_path):
    """A pointwise convolution with a stride, a depthwise one with a channel multiplier, or the
    intermediate read twice are not this template's: they fall to the other patterns."""
    for old, new in (("self.pointwise = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)",
                      "self.pointwise = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=2, bias=bias)"),
                     ("nn.Conv2d(in_channels, in_channels, kernel_size", "nn.Conv2d(in_channels, 2 * in_channels, kernel_size"),
                     ("x = self.pointwise(x)\n        return x", "return self.pointwise(x) + x.mean()")):
        source = (HERE / "separable_conv.py").read_text()
        assert old in source, old
        if "2 * in_channels" in new:  # the pointwise convolution takes the multiplied channels
            source = source.replace("nn.Conv2d(in_channels, out_channels, kernel_size=1", "nn.Conv2d(2 * in_channels, out_channels, kernel_size=1")
        path = tmp_path / f"variant_{abs(hash(new))}.py"
        path.write_text(source.replace(old, new))
        assert capture(load_problem(str(path))).kind != "separable_conv", new


@pytest.mark.slow
def test_networks_built_by_helpers_copy_them_and_hold_the_same_weights(tmp_path, monkeypatch):
    """KernelBench's level-3 networks build their layers with a helper method (``_make_layer``), a
    class attribute (``expansion``) and module-level block classes: ModelNew gets the methods and
    attributes of Model that __init__ uses, and the block classes (with what they read) at module
    level, so the same seed draws the same weights and the candidate is judged correct."""
    problem = load_problem(str(HERE / "partial_helpers.py"))
    pattern = capture(problem)
    assert pattern.kind == "graph" and "graph_norm" in kinds(pattern), pattern.reason
    assert "class Block(nn.Module):" in pattern.helpers and "WIDTH" in dict(pattern.constants)
    assert "def _make_layer(self, blocks):" in pattern.init and "growth = 2" in pattern.init
    source = judged_correct(HERE / "partial_helpers.py", {"template": "graph_norm", "block": 64}, tmp_path, monkeypatch)
    assert source.index("class Block(nn.Module):") < source.index("class ModelNew(nn.Module):")
    # a helper that refers to Model itself cannot be copied faithfully
    path = problem_variant(tmp_path, "partial_helpers.py", {"        return torch.relu(self.bn(self.conv(x)))":
                                                     "        return torch.relu(self.bn(self.conv(x))) if Model else x"})
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "unsupported" and "refers to Model itself" in pattern.reason, pattern.reason


@pytest.mark.slow
def test_copied_members_come_in_source_order_whatever_the_hash_seed():
    """The members of Model that __init__ uses (a class attribute, a helper method) are copied in the
    order Model lists them, so the same problem gives the same candidate source (and cache key) in
    every process, not one that depends on PYTHONHASHSEED."""
    check = """
import sys
from loopwise.kernels.expert.reference_init import reference_init
from loopwise.kernels.problem import load_problem
problem = load_problem(sys.argv[1])
print(reference_init(problem.source, problem.load_module()).text)
"""
    texts = set()
    for seed in ("0", "1", "2", "3"):
        run = subprocess.run([sys.executable, "-c", check, str(HERE / "partial_helpers.py")], capture_output=True,
                             text=True, timeout=300, env=dict(os.environ, PYTHONHASHSEED=seed))
        assert run.returncode == 0, run.stderr[-2000:]
        texts.add(run.stdout)
    assert len(texts) == 1
    text = texts.pop()
    assert text.index("def __init__") < text.index("growth = 2") < text.index("def _make_layer")


def test_a_model_whose_output_is_random_gets_no_candidate():
    """Dropout in training mode (KernelBench L2/66's shape): no candidate can match a reference that
    does not match itself, so the expert proposes nothing and says why, rather than a partitioned
    forward bound to fail the judge's comparison."""
    from loopwise.core.propose import ProposalFailure, ProposalRequest

    problem = load_problem(str(HERE / "dropout_training.py"))
    pattern = capture(problem)
    assert pattern.kind == "unsupported" and variants(pattern, "fp32") == variants(pattern, "relaxed") == []
    assert "Dropout with p=0.2 in training mode" in pattern.reason and "random" in pattern.reason
    failures = ExpertProposer(problem).propose(ProposalRequest(task="", n=2))
    assert all(isinstance(f, ProposalFailure) and "random" in f.detail for f in failures)


def test_torch_imported_under_another_name_is_bound_again(tmp_path):
    """A problem that imports torch as ``th`` (KernelBench L3/46) and reads it in what ModelNew
    copies gets the name bound to the generated file's own torch, not refused."""
    path = problem_variant(tmp_path, "partial_helpers.py", {"import torch\n": "import torch\nimport torch as th\n",
                                                     "return torch.relu(self.bn": "return th.relu(self.bn"})
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "graph" and ("th", "torch") in pattern.constants, pattern.reason
    source = render(pattern, {"template": "graph_norm", "block": 64})
    module = load_candidate(source, tmp_path, "torch_as_th")
    assert module.th is module.torch


# A forward whose shapes cannot be propagated on the meta device: a tensor it makes on the CPU
# (torch.ones without a device) joins the meta input in a cat.
_NO_META = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        x = torch.tanh(x) * 2.0
        x = torch.cat([torch.ones(6, 1), x.narrow(1, 0, 36)], dim=1)
        return torch.cumprod(x, dim=1) + 1.0


def get_inputs():
    return [torch.randn(6, 37)]


def get_init_inputs():
    return []
'''


def test_a_forward_whose_shapes_cannot_be_propagated_gets_a_one_line_reason_and_prints_nothing(tmp_path, capfd):
    """fx's ShapeProp prints the traceback of a node it cannot run before raising: the capture's
    reason says which operation failed, in one line, and nothing reaches the terminal."""
    path = tmp_path / "no_meta.py"
    path.write_text(_NO_META)
    pattern = capture(load_problem(str(path)))
    out, err = capfd.readouterr()
    assert pattern.kind == "unsupported" and "\n" not in pattern.reason, pattern.reason
    assert "shapes could not be propagated (RuntimeError" in pattern.reason and "cat" in pattern.reason, pattern.reason
    assert "Traceback" not in err + out, err[-2000:]
