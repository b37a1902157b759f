"""Forwards that torch.fx cannot trace symbolically because they compute with a size (a scale
``1 / sqrt(head size)``, a buffer sliced by the sequence length, a branch on a shape or on where
the weights live) are traced with their sizes as numbers: they get templates, and the candidates
are right for the problem's inputs."""

import pytest
import torch

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.fx_graph import trace_as_called
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct  # noqa: E402 - tests/kernels/expert on sys.path

# a causal mask kept as a buffer larger than the sequence and sliced by its length, and the
# softmax scale computed from the feature size with math
MASKED = ("import math\nB, T, C = x.size()\ns = (x @ x.transpose(-2, -1)) * (1.0 / math.sqrt(x.size(-1)))\n"
          "s = s.masked_fill(self.mask[:, :T, :T] == 0, float('-inf'))\nx = torch.softmax(s, dim=-1) @ x")
MASK_INIT = "self.register_buffer('mask', torch.tril(torch.ones(16, 16)).view(1, 16, 16))"

# a branch on a shape: the first branch is the one the inputs take
SHAPE_BRANCH = "if x.shape[-1] > 8:\n    x = torch.tanh(x) * 2.0 + 1.0\nelse:\n    x = torch.sigmoid(x) - 1.0"

# a check of where the weights live (NetVLAD's), then work with them
DEVICE_CHECK = ("if x.device != self.w.device:\n    raise ValueError('wrong device')\n"
                "x = torch.exp(x @ self.w) + 1.0\nx = x / x.sum(dim=-1, keepdim=True)")
DEVICE_INIT = "self.w = nn.Parameter(torch.randn(24, 12))"


def _captured(tmp_path, name, forward, init="", inputs="torch.randn(2, 12, 24, dtype=DTYPE)"):
    return capture(load_problem(str(_problem(tmp_path, name, init, forward, inputs))))


def _meta(path):
    module = load_problem(str(path)).load_module()
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
    return model, list(module.get_inputs())


@pytest.mark.parametrize("name,forward,init", [("masked", MASKED, MASK_INIT), ("branch", SHAPE_BRANCH, ""),
                                               ("device", DEVICE_CHECK, DEVICE_INIT)])
def test_a_forward_that_computes_with_its_sizes_gets_a_template(tmp_path, name, forward, init):
    pattern = _captured(tmp_path, name, forward, init)
    assert pattern.kind != "unsupported", pattern.reason
    assert "cannot trace" not in pattern.reason


def test_sizes_become_numbers_and_the_branch_taken_is_the_inputs_one(tmp_path):
    model, args = _meta(_problem(tmp_path, "branch", "", SHAPE_BRANCH, "torch.randn(2, 12, 24, dtype=DTYPE)"))
    code = trace_as_called(model, args).code
    assert "tanh" in code and "sigmoid" not in code, code
    model, args = _meta(_problem(tmp_path, "narrow", "", SHAPE_BRANCH, "torch.randn(2, 12, 4, dtype=DTYPE)"))
    code = trace_as_called(model, args).code
    assert "sigmoid" in code and "tanh" not in code, code


def test_a_sliced_buffer_is_read_from_the_model_not_baked_into_the_graph(tmp_path):
    model, args = _meta(_problem(tmp_path, "masked", MASK_INIT, MASKED, "torch.randn(2, 12, 24, dtype=DTYPE)"))
    gm = trace_as_called(model, args)
    reads = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert reads == ["mask"], gm.code
    assert "0.2041" in gm.code  # 1 / sqrt(24)
    # sliced by constant bounds, fx's symbolic trace itself computes the mask from the buffer: traced again
    bounds = MASKED.replace(":T, :T", ":12, :12").replace("(1.0 / math.sqrt(x.size(-1)))", "0.25")
    model, args = _meta(_problem(tmp_path, "bounds", MASK_INIT, bounds, "torch.randn(2, 12, 24, dtype=DTYPE)"))
    gm = trace_as_called(model, args)
    assert [n.target for n in gm.graph.nodes if n.op == "get_attr"] == ["mask"], gm.code


def test_a_tensor_made_from_a_size_on_the_inputs_device_is_made_where_the_forward_runs(tmp_path, monkeypatch):
    """``torch.zeros(n, device=x.device)`` after ``int(x.size(0))``: n is a number, the device a
    call on the input, so the zeros are made on the device the candidate runs on."""
    forward = "n = int(x.size(0))\nx = x + torch.zeros(n, 1, 1, device=x.device)\nx = torch.relu(x) * 2.0"
    path = _problem(tmp_path, "zeros", "", forward, "torch.randn(2, 12, 24, dtype=DTYPE)")
    model, args = _meta(path)
    code = trace_as_called(model, args).code
    assert "torch.zeros(2, 1, 1, device = getattr_1)" in code and "getattr_1 = x.device" in code, code
    pattern = capture(load_problem(str(path)))
    judged_correct(path, {"template": _first_kind(pattern)}, tmp_path, monkeypatch)


@pytest.mark.parametrize("branch", ["x.device.type == 'cuda'", "x.is_cuda", "x.is_contiguous()",
                                    "x.stride(-1) == 1", "x.get_device() >= 0"])
def test_a_branch_on_where_or_how_a_tensor_lives_is_not_traced_with_sizes(tmp_path, branch):
    """The meta values know the sizes, not the device the forward runs on nor the GPU kernels'
    layouts: a branch on those would take the meta tensor's way, so the trace fails instead."""
    forward = f"n = int(x.size(0))\nif {branch}:\n    x = torch.tanh(x) * n\nelse:\n    x = torch.sigmoid(x) * n"
    pattern = _captured(tmp_path, "branchy", forward)
    assert pattern.kind == "unsupported" and "cannot trace forward" in pattern.reason, pattern


# a tensor moved to where the input lives (an RNN's initial state), in a forward that uses a size as a number
MOVED = "n = int(x.size(0))\nh = h.to(x.device)\nx = torch.tanh(x[:n] + h) * 2.0"


def test_a_device_read_from_an_input_is_read_when_the_forward_runs(tmp_path, monkeypatch):
    path = _problem(tmp_path, "moved", "", MOVED, "torch.randn(4, 33, dtype=DTYPE), torch.randn(4, 33, dtype=DTYPE)",
                    args="x, h")
    model, args = _meta(path)
    gm = trace_as_called(model, args)
    assert "meta" not in gm.code and "x.device" in gm.code, gm.code
    pattern = capture(load_problem(str(path)))
    assert pattern.kind != "unsupported", pattern.reason
    judged_correct(path, {"template": pattern.kind if pattern.kind != "graph" else _first_kind(pattern)},
                   tmp_path, monkeypatch)


def test_a_forward_that_writes_its_buffer_is_refused_in_a_trace_with_sizes_too(tmp_path):
    """The buffers are proxies in a trace with sizes as numbers, so fx records the write instead
    of running it; the write's value is computed on the model's own (meta) buffer, so the model is
    still seen to change its state from call to call, as the symbolic trace sees it."""
    init = "self.register_buffer('count', torch.zeros(12))"
    forward = "n = int(x.size(-1))\nself.count.add_(1.0)\nx = (x + self.count.view(12, 1)).view(2, 12 * n) * 2.0"
    pattern = _captured(tmp_path, "counter", forward, init)
    assert pattern.kind == "unsupported" and "the forward writes the model's count in place" in pattern.reason, pattern


def test_a_module_run_for_its_sizes_keeps_its_state(tmp_path):
    """BatchNorm in training mode updates its statistics when called: the sizes' trace computes a
    module's value on a copy, so the model is not taken for one that writes its own state."""
    forward = "n = int(x.size(-1))\nx = self.bn(x).view(2, 12 * n)\nx = torch.relu(x) * 2.0"
    path = _problem(tmp_path, "bn", "self.bn = nn.BatchNorm1d(12)", forward, "torch.randn(2, 12, 24, dtype=DTYPE)")
    model, args = _meta(path)
    before = model.bn.num_batches_tracked._version
    trace_as_called(model, args)
    assert model.bn.num_batches_tracked._version == before
    assert capture(load_problem(str(path))).kind != "unsupported"


@pytest.mark.parametrize("name,forward,init", [("masked", MASKED, MASK_INIT), ("device", DEVICE_CHECK, DEVICE_INIT)])
def test_a_forward_that_computes_with_its_sizes_is_judged_correct(tmp_path, monkeypatch, name, forward, init):
    path = _problem(tmp_path, name, init, forward, "torch.randn(2, 12, 24, dtype=DTYPE)")
    pattern = capture(load_problem(str(path)))
    judged_correct(path, {"template": pattern.kind if pattern.kind != "graph" else _first_kind(pattern)},
                   tmp_path, monkeypatch)


def _first_kind(pattern):
    from loopwise.kernels.expert.partition import kinds

    return kinds(pattern)[0]


def test_a_trace_that_failed_after_assigning_the_model_is_not_retried_on_it(tmp_path):
    """The symbolic trace fails after ``self.h = ...`` stored its proxy on the model; a second trace
    would read that dead proxy (a graph that computes something else), so none is made."""
    init = "self.h = torch.randn(4, 24)"
    forward = ("self.h = self.h.to(x.dtype)\nn = int(x.size(0))\na = x.to(torch.float32)\n"
               "b = (x[:n] * 3.0).to(torch.float32)\nx = torch.tanh(a) + torch.add(self.h, b)")
    pattern = _captured(tmp_path, "assigned", forward, init, "torch.randn(4, 24, dtype=DTYPE)")
    assert pattern.kind == "unsupported" and "cannot trace forward" in pattern.reason, pattern


def test_a_device_compared_after_a_move_is_not_answered(tmp_path):
    """``x.device == y.device`` where y was moved (``.cpu()``) is no longer "one device"."""
    forward = ("n = int(x.size(0))\ny = x.cpu()\nif x.device == y.device:\n    x = torch.tanh(x) * n\n"
               "else:\n    x = torch.sigmoid(x) * n")
    pattern = _captured(tmp_path, "moved_cmp", forward)
    assert pattern.kind == "unsupported" and "cannot trace forward" in pattern.reason, pattern
