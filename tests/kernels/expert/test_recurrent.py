"""Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) as Triton kernels: the ``recurrent`` template for a
forward that is the module and what selects from its results (KernelBench L3/36, 37, 39-42), in two
variants (the time steps walked inside one launch, or one launch per time step spread over the
hidden units: ``recurrent_steps``), and the recurrent part of a partitioned forward (L3/38, whose
Linear on the last step the GEMM plan takes beside cuDNN's recurrence); judged against PyTorch in
Triton's interpreter at small sizes, with the configurations the kernels do not compute refused
with their reason."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.generate import fits, render, variants
from loopwise.kernels.expert.partition import kinds, launches, plan
from loopwise.kernels.expert.proposer import ExpertProposer
from loopwise.kernels.problem import load_problem

from expert_judging import judged_correct  # noqa: E402 - tests/kernels/expert on sys.path

# KernelBench L3/36-42 at reduced sizes (hidden 12: no power of two): the module, its options, the
# state the forward passes, and what it returns.
KERNELBENCH = {
    "36_LSTMHn": ("LSTM", "batch_first=True", "(h0, c0)", "out, state = self.rnn(x, (h0, c0))\n"
                  "out = self.fc(out[:, -1, :])\nreturn state[0]"),
    "37_LSTMCn": ("LSTM", "batch_first=True", "(h0, c0)", "out, state = self.rnn(x, (h0, c0))\n"
                  "out = self.fc(out[:, -1, :])\nreturn state[1]"),
    "38_LSTMBidirectional": ("LSTM", "batch_first=True, bidirectional=True", "(h0, c0)",
                             "out, hn = self.rnn(x, (h0, c0))\nreturn self.fc(out[:, -1, :])"),
    "39_GRU": ("GRU", "", "h0", "output, h_n = self.rnn(x, h0)\nreturn output"),
    "40_GRUHidden": ("GRU", "", "h0", "output, h_n = self.rnn(x, h0)\nreturn h_n"),
    "41_GRUBidirectional": ("GRU", "bidirectional=True", "h0", "output, h_n = self.rnn(x, h0)\nreturn output"),
    "42_GRUBidirectionalHidden": ("GRU", "bidirectional=True", "h0", "output, h_n = self.rnn(x, h0)\nreturn h_n"),
}


def recurrent_problem(tmp_path, name, module="LSTM", options="batch_first=True", state="(h0, c0)",
                      forward="out, state = self.rnn(x, (h0, c0))\nreturn out", batch=3, steps=7, features=5,
                      hidden=12, layers=2, extra_init=""):
    """A problem in KernelBench L3/36-42's shape: Model(input_size, hidden_size, num_layers) holds
    ``self.rnn`` (``module`` with ``options``) and a Linear ``self.fc`` over its output; its forward
    takes x and the state's tensors (``state`` names them: h0, or (h0, c0), or "" for none)."""
    directions = 2 if "bidirectional=True" in options else 1
    time_major = "batch_first=True" not in options
    shape = f"{steps}, {batch}, {features}" if time_major else f"{batch}, {steps}, {features}"
    tensors = [tensor for tensor in ("h0", "c0") if tensor in state]
    inputs = ", ".join([f"torch.rand({shape})"] + [f"torch.rand({layers * directions}, {batch}, {hidden})"] * len(tensors))
    body = "\n".join("        " + line for line in forward.splitlines())
    path = tmp_path / f"{name}.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self, input_size, hidden_size, num_layers):\n        super().__init__()\n"
        f"        self.rnn = nn.{module}(input_size, hidden_size, num_layers{', ' + options if options else ''})\n"
        f"        self.fc = nn.Linear(hidden_size * {directions}, 10)\n{extra_init}\n"
        f"    def forward(self, {', '.join(['x', *tensors])}):\n{body}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return [{features}, {hidden}, {layers}]\n")
    return path


def kernelbench_copy(tmp_path, name):
    module, options, state, forward = KERNELBENCH[name]
    return recurrent_problem(tmp_path, name, module, options, state, forward)


@pytest.mark.parametrize("name", [name for name in KERNELBENCH if name != "38_LSTMBidirectional"])
def test_kernelbench_recurrent_problems_get_the_recurrent_template(tmp_path, name):
    """Each of L3/36, 37, 39-42 is the recurrent template: the module's options read off it, the
    Linear L3/36 and 37 compute and never return gone from the forward."""
    module, options, _, _ = KERNELBENCH[name]
    pattern = capture(load_problem(str(kernelbench_copy(tmp_path, name))))
    assert pattern.kind == "recurrent" and variants(pattern) == ["recurrent", "recurrent_steps"], pattern.reason
    op = dict(pattern.params)["op"]
    assert (op.mode, op.layers, op.hidden, op.directions, op.batch_first, op.bias, op.state) == (
        module, 2, 12, 2 if "bidirectional" in options else 1, "batch_first" in options, True, True)
    source = render(pattern)
    assert "rnn_0_step_kernel[" in source and "rnn_0_proj_kernel[" in source and "self.fc(" not in source
    assert ExpertProposer._parse_moves(source) == {"template": "recurrent", "block": 128, "warps": 8, "chunk": 32}


def test_tiles_past_shared_memory_are_never_proposed(tmp_path):
    """Four gates' W_hh tiles of 128 hidden units by 64 columns, in two pipeline stages, are more
    than an H100 block's shared memory (and, launched once a step, of 64 by 128): the search
    neither proposes them for an LSTM of hidden 256 nor leaves out a GRU of hidden 12, where the
    launcher narrows both to 16."""
    from loopwise.core.propose import ProposalRequest

    wide = recurrent_problem(tmp_path, "wide", hidden=256)
    pattern = capture(load_problem(str(wide)))
    assert not fits(pattern, {"template": "recurrent", "block": 128, "chunk": 64, "warps": 8})
    assert fits(pattern, {"template": "recurrent", "block": 256, "chunk": 16, "warps": 8})
    assert not fits(pattern, {"template": "recurrent_steps", "block": 64, "chunk": 128})
    assert fits(pattern, {"template": "recurrent_steps", "block": 128, "chunk": 32})
    narrow = capture(load_problem(str(kernelbench_copy(tmp_path, "39_GRU"))))
    assert fits(narrow, {"template": "recurrent", "block": 256, "chunk": 128, "warps": 8})
    assert fits(narrow, {"template": "recurrent_steps", "block": 128, "chunk": 128})
    expert = ExpertProposer(load_problem(str(wide)))
    proposals = expert.propose(ProposalRequest(task="", n=12))
    assert len(proposals) == 12
    for proposal in proposals:
        moves = ExpertProposer._parse_moves(proposal.content)
        assert moves["template"] in ("recurrent", "recurrent_steps") and fits(pattern, moves), moves


def kernelbench_sized(tmp_path, name="36_LSTMHn"):
    """KernelBench's L3/36-42 at their own sizes: batch 10, sequence 512, input 128, hidden 256, 6 layers."""
    module, options, state, forward = KERNELBENCH[name]
    return recurrent_problem(tmp_path, name, module, options, state, forward, batch=10, steps=512, features=128,
                             hidden=256, layers=6)


def step_launches(source, problem) -> list:
    """[(grid, step)] of each launch of ``source``'s step kernel on ``problem``'s inputs, run on the
    meta device (real sizes cost no memory, the kernels do not run); ``step`` is None where the
    kernel walks the steps itself."""
    import inspect
    import tempfile

    import torch

    from loopwise.kernels.evaluate.sandbox import _import_candidate

    with tempfile.TemporaryDirectory() as tmp:
        module = _import_candidate(source, tmp)
    reference, seen = problem.load_module(), []
    kernel = type(module.rnn_0_step_kernel)  # compiled or interpreted (TRITON_INTERPRET), as the import made it

    def run(self, *args, grid, warmup, **kwargs):
        if self.fn.__name__ == "rnn_0_step_kernel":
            named = inspect.signature(self.fn).bind_partial(*args).arguments
            seen.append((tuple(grid), named.get("step")))

    original, kernel.run = kernel.run, run
    try:
        with torch.device("meta"):
            module.ModelNew(*reference.get_init_inputs())(*reference.get_inputs())
    finally:
        kernel.run = original
    return seen


def test_an_l3_36_sized_lstm_is_proposed_with_each_time_step_spread_over_programs(tmp_path):
    """At L3/36's sizes the step kernel that walks the time steps is one program per layer (10 batch
    rows, one direction): the search's first proposals from the reference are that template and,
    beside it, ``recurrent_steps``, which launches each time step over 16 programs of 16 hidden units
    (hidden 256), replayed from a CUDA graph (6 x 513 launches); its note reads back as its moves."""
    from loopwise.core.propose import ProposalRequest

    problem = load_problem(str(kernelbench_sized(tmp_path)))
    proposals = ExpertProposer(problem).propose(ProposalRequest(task="", n=2))
    moves = [ExpertProposer._parse_moves(p.content) for p in proposals]
    steps = {"template": "recurrent_steps", "block": 16, "warps": 2, "chunk": 32, "cudagraph": 1}
    assert moves == [{"template": "recurrent", "block": 128, "warps": 8, "chunk": 32}, steps]
    assert fits(capture(problem), steps)
    walked = step_launches(proposals[0].content, problem)
    assert walked == [((1, 1), None)] * 6
    spread = step_launches(proposals[1].content, problem)
    assert spread == [((16, 1, 1), step) for _ in range(6) for step in range(512)]


def test_an_lstm_with_a_linear_on_the_last_step_has_cudnns_recurrence_beside_ours(tmp_path):
    """L3/38 (bidirectional, batch first, the state given, a Linear on the last step) is partitioned:
    the norm plan makes the LSTM our kernels and leaves the Linear to PyTorch; the GEMM plan makes
    the Linear our GEMM and leaves the LSTM to cuDNN, so the search measures both."""
    pattern = capture(load_problem(str(kernelbench_copy(tmp_path, "38_LSTMBidirectional"))))
    assert pattern.kind == "graph" and sorted(variants(pattern)) == sorted(["graph_norm", "graph_linear"]), pattern.reason
    chosen = plan(pattern, "graph_norm")
    (part,) = [n for n in chosen["norms"] if n.kind == "recurrent"]
    assert part.recurrent.mode == "LSTM" and part.recurrent.directions == 2 and "Linear" in chosen["pytorch"]
    chosen = plan(pattern, "graph_linear")
    assert "LSTM" in chosen["pytorch"] and [g.ops for g in chosen["gemms"]] == [("linear",)]


@pytest.mark.slow
def test_an_lstm_with_a_linear_on_the_last_step_is_judged_correct_in_both_plans(tmp_path, monkeypatch):
    path = kernelbench_copy(tmp_path, "38_LSTMBidirectional")
    judged_correct(path, {"template": "graph_norm"}, tmp_path, monkeypatch)
    judged_correct(path, {"template": "graph_linear", "tile": 64, "chunk": 16}, tmp_path, monkeypatch)


SLOW_CASES = {  # recurrent_problem's arguments after the name
    "gru_bidirectional_time_major": dict(zip(("module", "options", "state", "forward"), KERNELBENCH["41_GRUBidirectional"])),
    "lstm_cell_state": dict(zip(("module", "options", "state", "forward"), KERNELBENCH["37_LSTMCn"])),
    "rnn_tanh_no_state": {"module": "RNN", "state": "", "forward": "out, h = self.rnn(x)\nreturn out"},
    "rnn_relu_no_bias_bidirectional": {"module": "RNN", "options": "nonlinearity='relu', bias=False, bidirectional=True",
                                       "state": "h0", "forward": "out, h = self.rnn(x, h0)\nreturn h"},
    "gru_no_bias_no_state": {"module": "GRU", "options": "batch_first=True, bias=False", "state": "",
                             "forward": "out, h = self.rnn(x)\nreturn out"},
    "lstm_three_layers_time_major": {"options": "", "layers": 3, "hidden": 20,
                                     "forward": "out, (h, c) = self.rnn(x, (h0, c0))\nreturn c"},
}


@pytest.mark.slow
@pytest.mark.parametrize("template", ["recurrent", "recurrent_steps"])
@pytest.mark.parametrize("name", list(SLOW_CASES))
def test_recurrent_configurations_are_judged_correct(tmp_path, monkeypatch, name, template):
    """LSTM, GRU and RNN (tanh, relu) in both layouts, one or two directions, with and without
    biases and an initial state, each result (output, h_n, c_n), in both variants; hidden 20 in
    two blocks of 16 (the three-layer LSTM's, and every one launched per time step: two programs
    a step, the second with 4 live hidden units)."""
    given = dict(SLOW_CASES[name]) | ({"hidden": 20} if template == "recurrent_steps" else {})
    path = recurrent_problem(tmp_path, name, **given)
    assert capture(load_problem(str(path))).kind == "recurrent"
    two_blocks = name.startswith("lstm_three") or template == "recurrent_steps"
    moves = {"block": 16, "chunk": 16, "warps": 4} if two_blocks else {}
    judged_correct(path, {"template": template, **moves}, tmp_path, monkeypatch)


def test_one_launch_per_time_step_is_judged_correct(tmp_path, monkeypatch):
    """An RNN (tanh), batch first, launched once per time step: hidden 20 in two blocks of 16 (the
    second with 4 live units), the output and h_n judged (both directions: the slow tier)."""
    path = recurrent_problem(tmp_path, "rnn_steps", "RNN", "batch_first=True", "h0",
                             "out, h = self.rnn(x, h0)\nreturn out, h", batch=3, steps=3, hidden=20, layers=1)
    source = judged_correct(path, {"template": "recurrent_steps", "block": 16, "chunk": 16}, tmp_path, monkeypatch)
    assert [grid for grid, _ in step_launches(source, load_problem(str(path)))] == [(2, 1, 1)] * 3


@pytest.mark.slow
def test_a_step_spread_over_three_blocks_is_judged_correct(tmp_path, monkeypatch):
    """A bidirectional time-major GRU of two layers launched once per time step: hidden 40 in three
    blocks of 16 (the last with 8 live units), the output and h_n judged."""
    path = recurrent_problem(tmp_path, "gru_steps", "GRU", "bidirectional=True", "h0",
                             "out, h = self.rnn(x, h0)\nreturn out, h", batch=3, steps=4, hidden=40)
    source = judged_correct(path, {"template": "recurrent_steps", "block": 16, "chunk": 32}, tmp_path, monkeypatch)
    assert [grid for grid, _ in step_launches(source, load_problem(str(path)))] == [(3, 1, 2)] * 8


_FIFTY_STEPS = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import candidate, reference
torch.manual_seed(0)
model = reference.Model(*reference.get_init_inputs())
ours = candidate.ModelNew(*reference.get_init_inputs())
ours.load_state_dict(model.state_dict())
x, *state = [2 * torch.rand_like(t) - 1 for t in reference.get_inputs()]
state = tuple(state) if len(state) == 2 else state[0]
with torch.no_grad():
    want, got = model.rnn(x, state), candidate.rnn_0(x, state, ours.rnn)
torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
"""


@pytest.mark.parametrize("module,template", [("LSTM", "recurrent"), pytest.param("GRU", "recurrent", marks=pytest.mark.slow),
                                             pytest.param("LSTM", "recurrent_steps", marks=pytest.mark.slow)])
def test_fifty_steps_stay_within_the_judges_tolerance(tmp_path, module, template):
    """The recurrence's rounding accumulates over the steps: after 50 steps of two bidirectional
    layers the output and the final states (h_n, and c_n for an LSTM) still lie within atol = rtol
    = 1e-4 of PyTorch's, in both variants."""
    import os
    import subprocess
    import sys

    state = "(h0, c0)" if module == "LSTM" else "h0"
    path = recurrent_problem(tmp_path, "reference", module, "bidirectional=True", state,
                             f"out, state = self.rnn(x, {state})\nreturn out", batch=2, steps=50, hidden=20)
    (tmp_path / "candidate.py").write_text(render(capture(load_problem(str(path))), {"template": template}))
    run = subprocess.run([sys.executable, "-c", _FIFTY_STEPS, str(tmp_path)], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.parametrize("options,reason", [
    ("batch_first=True, dropout=0.3", "LSTM with dropout=0.3 between its 2 layers: random in training, "
                                      "the recurrent part computes dropout 0"),
    ("batch_first=True, proj_size=4", "LSTM with proj_size=4: the recurrent part has no projection of the hidden state"),
])
def test_a_configuration_the_kernels_do_not_compute_is_refused_with_its_reason(tmp_path, options, reason):
    """Dropout between layers (random in training) and LSTM's projected state stay in PyTorch;
    the capture says why in one line, and proposes nothing."""
    forward = "out, state = self.rnn(x)\nreturn out"
    path = recurrent_problem(tmp_path, "refused", "LSTM", options, "", forward)
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "unsupported" and variants(pattern) == []
    assert reason in pattern.reason and "\n" not in pattern.reason, pattern.reason


PARTITIONED = ("self.proj = nn.Linear(5, 5)\n", "y = torch.tanh(self.proj(x)) * 2.0\n"
               "out, h = self.rnn(y, h0)\nreturn torch.relu(out) + 1.0")


def _partitioned(tmp_path):
    init, forward = PARTITIONED
    path = recurrent_problem(tmp_path, "partitioned", "GRU", "batch_first=True", "h0", forward,
                             extra_init="        " + init)
    return path, capture(load_problem(str(path)))


def test_a_recurrent_module_inside_a_forward_is_one_part_of_the_plans(tmp_path):
    """A GRU between other work is a part of the norm plan, each layer two launches (projections,
    time steps); the GEMM plan (the Linear's GEMM with the tanh and the scale as its epilogue) leaves
    it to PyTorch, so the search has the Triton recurrence and cuDNN's side by side."""
    _, pattern = _partitioned(tmp_path)
    assert pattern.kind == "graph" and kinds(pattern) == ["graph", "graph_norm", "graph_linear"], pattern.reason
    chosen = plan(pattern, "graph_norm")
    (part,) = [n for n in chosen["norms"] if n.kind == "recurrent"]
    assert part.module == "rnn" and part.recurrent.mode == "GRU" and part.recurrent.layers == 2
    assert "GRU" not in chosen["pytorch"] and "rnn_0(" in render(pattern, {"template": "graph_norm"})
    chosen = plan(pattern, "graph_linear")
    assert not [n for n in chosen["norms"] if n.kind == "recurrent"] and "GRU" in chosen["pytorch"]
    assert [g.ops for g in chosen["gemms"]] == [("linear", "tanh", "mul")]
    assert "rnn_0(" not in render(pattern, {"template": "graph_linear"})


@pytest.mark.slow
def test_a_recurrent_part_between_gemms_and_passes_is_judged_correct(tmp_path, monkeypatch):
    path, _ = _partitioned(tmp_path)
    judged_correct(path, {"template": "graph_norm"}, tmp_path, monkeypatch)
    judged_correct(path, {"template": "graph_linear", "tile": 64, "chunk": 16}, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("module,block,chunk", [("GRU", 64, 128), ("LSTM", 128, 64)])
def test_the_shared_memory_rule_agrees_with_the_compiled_step_kernel(tmp_path, module, block, chunk):
    """The rule the search keeps tiles by (generate.recurrent_fits) against what the step kernel,
    compiled ahead of time for sm_90a at hidden 256, asks of shared memory: three gates' tiles of 64
    hidden units by 128 columns fit (the nearest to the limit of those the rule admits), four gates'
    of 128 by 64 do not."""
    from loopwise.kernels.expert.aot import compile_for_hopper
    from loopwise.kernels.expert.generate import HOPPER_SHARED_BYTES, recurrent_fits

    state = "(h0, c0)" if module == "LSTM" else "h0"
    path = recurrent_problem(tmp_path, f"wide_{module}", module, "batch_first=True", state,
                             f"out, s = self.rnn(x, {state})\nreturn out", hidden=256, layers=1)
    problem = load_problem(str(path))
    pattern = capture(problem)
    source = render(pattern, {"template": "recurrent", "block": block, "chunk": chunk, "warps": 8})
    report = compile_for_hopper(source, problem, "rnn_0_step_kernel")
    admitted = recurrent_fits(dict(pattern.params)["op"], block, chunk)
    assert admitted == (module == "GRU")
    assert (report["shared_bytes"] <= HOPPER_SHARED_BYTES) == admitted, report


@pytest.mark.slow
@pytest.mark.parametrize("module,block,chunk,admitted", [("GRU", 64, 128, True), ("LSTM", 64, 128, False),
                                                         ("LSTM", 16, 32, True)])
def test_the_shared_memory_rule_agrees_with_the_compiled_kernel_of_one_step(tmp_path, module, block, chunk, admitted):
    """The rule for the kernel of one time step (recurrent_fits with per_step) against what it asks
    of shared memory compiled for sm_90a at hidden 256: three gates' tiles of 64 hidden units by 128
    columns fit (the nearest to the limit of those the rule admits), four gates' do not, and the
    default (16 units by 32 columns) does."""
    from loopwise.kernels.expert.aot import compile_for_hopper
    from loopwise.kernels.expert.generate import HOPPER_SHARED_BYTES, recurrent_fits

    state = "(h0, c0)" if module == "LSTM" else "h0"
    path = recurrent_problem(tmp_path, f"wide_{module}", module, "batch_first=True", state,
                             f"out, s = self.rnn(x, {state})\nreturn out", hidden=256, layers=1)
    problem = load_problem(str(path))
    pattern = capture(problem)
    source = render(pattern, {"template": "recurrent_steps", "block": block, "chunk": chunk})
    report = compile_for_hopper(source, problem, "rnn_0_step_kernel", pick=0)
    assert recurrent_fits(dict(pattern.params)["op"], block, chunk, per_step=True) == admitted
    assert fits(pattern, {"template": "recurrent_steps", "block": block, "chunk": chunk}) == admitted
    assert (report["shared_bytes"] <= HOPPER_SHARED_BYTES) == admitted, report
