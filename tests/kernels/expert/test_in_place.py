"""In-place writes in a forward: ``x += y`` and its kin, ``x.add_()``, ``torch.relu_``,
``inplace=True``. A later read of the tensor written sees the write; a view made before it, or the
model's own state, keeps the write where PyTorch makes it (or the forward gets no candidate)."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.partition import kinds, plan
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct  # noqa: E402 - tests/kernels/expert on sys.path

ALIASED = "x = x * 0.5\nz = x\n{write}\nx = torch.sigmoid(z * 2.0) * 3.0"
WRITES = {  # the write, the operation the fused pass must compute first
    "iadd": ("x += 1.5", "add"), "isub": ("x -= 1.5", "sub"), "imul": ("x *= 1.5", "mul"),
    "itruediv": ("x /= 1.5", "truediv"), "add_": ("x.add_(1.5)", "add"), "mul_": ("x.mul_(1.5)", "mul"),
    "relu_": ("torch.relu_(x)", "relu"), "relu_inplace": ("F.relu(x, inplace=True)", "relu"),
    "relu_positional": ("F.relu(x, True)", "relu"), "method_relu_": ("x.relu_()", "relu"),
}


def _captured(tmp_path, name, forward, init="", inputs="torch.randn(4, 33, dtype=DTYPE)", dtype="float32"):
    return capture(load_problem(str(_problem(tmp_path, name, init, forward, inputs, dtype))))


@pytest.mark.parametrize("name", list(WRITES))
def test_a_name_read_after_an_in_place_write_to_its_tensor_reads_the_written_value(tmp_path, name):
    """``z = x; x += 1.5; sigmoid(z * 2)``: z is x, so the pass computes the write before the rest."""
    write, op = WRITES[name]
    pattern = _captured(tmp_path, name, ALIASED.format(write=write))
    assert pattern.kind == "elementwise", pattern.reason
    assert pattern.ops == ("mul", op, "mul", "sigmoid", "mul")


INPUT_WRITE = "x.mul_(0.5)\ny = torch.sigmoid(x * 2.0)\nx = y + 1.0"


@pytest.mark.parametrize("write", ["x.mul_(0.5)", "x += 1.5", "F.relu(x, inplace=True)", "x[:, 1] = 5.0"])
def test_a_write_to_the_forwards_input_stays_in_pytorch(tmp_path, write):
    """The caller reads its tensor after the call: a write to it is made where PyTorch makes it,
    and what reads after it is fused."""
    forward = f"{write}\ny = torch.sigmoid(x * 2.0)\nx = y + 1.0"
    chosen = plan(_captured(tmp_path, "input", forward), "graph")
    assert chosen["pytorch"] and [g.ops for g in chosen["groups"]] == [("mul", "sigmoid", "add")], chosen


@pytest.mark.slow
def test_a_forward_that_writes_its_input_is_judged_correct(tmp_path, monkeypatch):
    """The judge holds a candidate to the reference's writes into its inputs as to its outputs."""
    judged_correct(_problem(tmp_path, "input", "", INPUT_WRITE, "torch.randn(4, 33, dtype=DTYPE)"),
                   {"template": "graph"}, tmp_path, monkeypatch)


def test_a_write_a_view_made_before_it_sees_stays_in_pytorch(tmp_path):
    """The view v of y was made before ``y += 1``: it sees the write, so the write is kept where
    PyTorch makes it and only what reads after it is fused."""
    forward = "y = x * 2.0\nv = y.view(-1)\ny += 1.0\nx = torch.sigmoid(v.view(4, 33)) * 3.0"
    pattern = _captured(tmp_path, "view", forward)
    assert pattern.kind == "graph" and "in-place write" in pattern.reason, pattern.reason
    chosen = plan(pattern, "graph")
    assert "iadd" in chosen["pytorch"] and [g.ops for g in chosen["groups"]] == [("sigmoid", "mul")]


@pytest.mark.parametrize("init", ["self.register_buffer('s', torch.ones(33))", "self.s = torch.ones(33)"])
def test_a_forward_that_writes_its_models_tensor_gets_no_candidate(tmp_path, init):
    """``self.s += 1`` (a buffer, a plain tensor attribute) changes the model from call to call: no
    candidate holds that state."""
    pattern = _captured(tmp_path, "state", "self.s += 1.0\nx = torch.sigmoid(x * self.s)", init=init)
    assert pattern.kind == "unsupported" and "writes the model's s in place" in pattern.reason


def test_a_half_write_of_a_float_sum_keeps_its_dtype(tmp_path):
    """``h += f`` with h float16 and f float32 stores float16 (out of place it would be float32):
    the write is kept where PyTorch makes it."""
    forward = "h = x * 2.0\nh += self.f\nx = torch.sigmoid(h) * 3.0"
    pattern = _captured(tmp_path, "half", forward, init="self.register_buffer('f', torch.ones(33))", dtype="float16")
    assert "iadd" in plan(pattern, kinds(pattern)[0])["pytorch"], pattern.reason


RESIDUAL = ("self.conv = nn.Conv2d(8, 8, 3, padding=1)\nself.bn = nn.BatchNorm2d(8)\nself.relu = nn.ReLU(inplace=True)",
            "identity = x\nout = self.relu(self.bn(self.conv(x)))\nout += identity\nx = self.relu(out)")


def test_a_residual_add_in_place_is_fused_as_an_add(tmp_path):
    """ResNet's ``out += identity`` (nothing reads out's old value) is an add like any other."""
    pattern = _captured(tmp_path, "residual", RESIDUAL[1], RESIDUAL[0], "torch.randn(2, 8, 6, 6, dtype=DTYPE)")
    assert "graph_conv" in kinds(pattern), pattern.reason
    assert "iadd" not in plan(pattern, "graph")["pytorch"]
    assert any("add" in g.ops for g in plan(pattern, "graph")["groups"]), plan(pattern, "graph")


SETITEM = "y = x * 2.0\nv = y[:, :3]\ny[:, 1] = 5.0\nx = torch.tanh(v) * 2.0 + torch.sigmoid(y[:, 2:5])"


def test_an_item_assignment_is_traced_as_a_write_kept_in_pytorch(tmp_path):
    """``y[:, 1] = 5.0`` (which fx's own tracer refuses) writes y and the view v: the write stays in
    PyTorch, what reads after it is fused there."""
    chosen = plan(_captured(tmp_path, "setitem", SETITEM), "graph")
    assert "setitem" in chosen["pytorch"] and [g.ops for g in chosen["groups"]] == [("tanh", "mul", "sigmoid", "add")]


@pytest.mark.slow
@pytest.mark.parametrize("forward,template", [
    (SETITEM, "graph"),
    (ALIASED.format(write="x += 1.5"), "elementwise"),
    (ALIASED.format(write="F.relu(x, inplace=True)"), "elementwise"),
    ("y = x * 2.0\nv = y.view(-1)\ny += 1.0\nx = torch.sigmoid(v.view(4, 33)) * 3.0", "graph"),
    ("x = x * 0.5\nz = x\nx *= 2.0\nx = torch.sum(z, dim=-1)", "graph_norm"),
])
def test_forwards_with_in_place_writes_are_judged_correct(tmp_path, monkeypatch, forward, template):
    judged_correct(_problem(tmp_path, "judged", "", forward, "torch.randn(4, 33, dtype=DTYPE)"),
                   {"template": template}, tmp_path, monkeypatch)


@pytest.mark.slow
def test_a_residual_block_with_in_place_writes_is_judged_correct(tmp_path, monkeypatch):
    path = _problem(tmp_path, "residual", RESIDUAL[0], RESIDUAL[1], "torch.randn(2, 8, 6, 6, dtype=DTYPE)")
    judged_correct(path, {"template": "graph"}, tmp_path, monkeypatch)


@pytest.mark.slow
def test_a_tensor_read_after_an_in_place_module_wrote_it_is_judged_correct(tmp_path, monkeypatch):
    """y is read after ReLU(inplace=True) wrote it: the read is of the ReLU's output, fused with it."""
    from expert_judging import PARTIAL

    path = tmp_path / "shared.py"
    path.write_text(PARTIAL.format(body="y = self.conv(x)\n        z = self.act(y)\n        return self.norm(z * 2.0 + y)",
                                   extra="self.act = nn.ReLU(inplace=True)"))
    judged_correct(path, {"template": "graph"}, tmp_path, monkeypatch)


# Operations whose output can be their input's memory though they are not named as views: a view
# (ravel, broadcast_to, hsplit, a transposing einsum, broadcast_tensors of its second argument) or
# the input itself (type to its own dtype, positive, atleast_2d of a matrix).
ALIASES = {"ravel": "y.ravel()", "broadcast_to": "y.broadcast_to(4, 33)", "type": "y.type(torch.float32)",
           "positive": "y.positive()", "atleast_2d": "torch.atleast_2d(y)", "einsum": "torch.einsum('ij->ji', y).t()",
           "hsplit": "y.hsplit([33])[0]", "broadcast_second": "torch.broadcast_tensors(x[:1], y)[1]"}
ALIASED_BEFORE = "y = x * 2.0\nv = {alias}\ny += 1.0\nx = torch.sigmoid(v) * 3.0"


@pytest.mark.parametrize("name", list(ALIASES))
def test_a_write_an_alias_made_before_it_sees_stays_in_pytorch(tmp_path, name):
    """v shares y's memory (PyTorch says so, whatever the operation is called): it reads ``y += 1``."""
    pattern = _captured(tmp_path, name, ALIASED_BEFORE.format(alias=ALIASES[name]))
    assert "iadd" in plan(pattern, kinds(pattern)[0])["pytorch"], pattern.reason


def test_a_comparison_in_place_keeps_the_dtype_of_the_tensor_it_writes(tmp_path):
    """``x.gt_(0.6)`` stores 1.0 and 0.0 in x's float32; ``x.gt(0.6)`` would be boolean (and
    ``x + x`` of it True, not 2.0): the write stays where PyTorch makes it."""
    forward = "x = torch.sigmoid(x * 2.0 + 1.0)\nx.gt_(0.6)\nx = torch.sigmoid(x + x) * 3.0"
    pattern = _captured(tmp_path, "gt_", forward)
    assert "gt_" in plan(pattern, kinds(pattern)[0])["pytorch"], pattern.reason


@pytest.mark.slow
@pytest.mark.parametrize("forward", [
    ALIASED_BEFORE.format(alias=ALIASES["ravel"]),
    ALIASED_BEFORE.format(alias=ALIASES["einsum"]),
    # s reads the alias v before a write someone else (w) sees: s is computed before the write
    "y = x * 2.0\nw = y.view(-1)\nv = y.ravel()\ns = v * 3.0\ny.add_(1.0)\nx = torch.sigmoid(s.view(4, 33)) + w.view(4, 33)",
    "x = torch.sigmoid(x * 2.0 + 1.0)\nx.gt_(0.6)\nx = torch.sigmoid(x + x) * 3.0",
])
def test_forwards_with_writes_through_aliases_are_judged_correct(tmp_path, monkeypatch, forward):
    judged_correct(_problem(tmp_path, "aliased", "", forward, "torch.randn(4, 33, dtype=DTYPE)"),
                   {"template": "graph"}, tmp_path, monkeypatch)


DATA_WRITE = "y = x * 2.0\nz = torch.tanh(y)\ny.data += 1.0\nx = torch.sigmoid(y) * 3.0 + z"


def test_augmented_assignment_to_an_attribute_is_a_write(tmp_path):
    """``y.data += 1`` writes y (an attribute proxy, ``y.data``, records the write as y's own proxy does)."""
    pattern = _captured(tmp_path, "data", DATA_WRITE)
    assert "iadd" in plan(pattern, kinds(pattern)[0])["pytorch"], pattern.reason


@pytest.mark.slow
def test_a_forward_with_a_write_to_an_attribute_is_judged_correct(tmp_path, monkeypatch):
    judged_correct(_problem(tmp_path, "attribute", "", DATA_WRITE, "torch.randn(4, 33, dtype=DTYPE)"),
                   {"template": "graph"}, tmp_path, monkeypatch)


ATEN_WRITE = "y = x * 2.0\na = torch.tanh(y)\ntorch.ops.aten.relu_.default(y)\nx = a * 3.0 + y"


def test_an_aten_operator_whose_schema_writes_its_argument_is_a_write(tmp_path):
    """``torch.ops.aten.relu_.default(y)`` writes y (its schema says ``Tensor(a!)``): tanh(y), read
    after it, is computed before it, as the forward does."""
    chosen = plan(_captured(tmp_path, "aten", ATEN_WRITE), "graph")
    assert "relu_.default" in chosen["pytorch"] and "tanh" in chosen["pytorch"], chosen


@pytest.mark.slow
def test_a_forward_with_an_aten_write_is_judged_correct(tmp_path, monkeypatch):
    judged_correct(_problem(tmp_path, "aten", "", ATEN_WRITE, "torch.randn(4, 33, dtype=DTYPE)"),
                   {"template": "graph"}, tmp_path, monkeypatch)


@pytest.mark.parametrize("forward,init", [
    ("y = x * 2.0\ny.data = torch.tanh(x)\nx = torch.sigmoid(y) * 3.0", ""),
    ("self.w.data = self.w * 0.5\nx = torch.relu(x @ self.w) * 2.0 + 1.0", "self.w = nn.Parameter(torch.randn(33, 20))"),
])
def test_a_forward_that_assigns_a_tensors_data_gets_no_candidate(tmp_path, forward, init):
    """``y.data = t`` makes y hold t's values: fx would set an attribute of its proxy and record nothing."""
    pattern = _captured(tmp_path, "data_assign", forward, init=init)
    assert pattern.kind == "unsupported" and "assigns 'data'" in pattern.reason, pattern.reason
