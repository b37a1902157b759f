"""ModelNew's copy of the reference's ``__init__`` for models as they are written in the wild (Swin's):
a drop-path schedule read with ``.item()`` (no meta build), helpers made by the problem's own
factory (``to_2tuple = _ntuple(2)``) and the imports they need, a name the problem never binds in
a branch it never takes."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.reference_init import reference_init
from loopwise.kernels.problem import load_problem

from expert_judging import judged_correct  # noqa: E402 - tests/kernels/expert on sys.path

WILD = '''import torch
import torch.nn as nn
from itertools import repeat
import collections.abc


def _ntuple(n):
    def parse(x):
        if isinstance(x, collections.abc.Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple(repeat(x, n))
    return parse


to_2tuple = _ntuple(2)
{extra}

class Block(nn.Module):
    def __init__(self, dim, rate, use_checkpoint=False):
        super().__init__()
        self.fc = nn.Linear(dim, to_2tuple(dim)[1])
        self.rate = rate{init_extra}
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        if self.use_checkpoint:
            return checkpoint.checkpoint(self.fc, x)
        return self.fc(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        rates = [r.item() for r in torch.linspace(0, 0.1, 2)]
        self.blocks = nn.ModuleList([Block(16, r) for r in rates])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return torch.tanh(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''


def _wild(tmp_path, extra="", init_extra=""):
    path = tmp_path / "wild.py"
    path.write_text(WILD.format(extra=extra, init_extra=init_extra))
    return load_problem(str(path))


def test_a_model_written_in_the_wild_is_copied_with_its_helpers_and_imports(tmp_path, monkeypatch):
    problem = _wild(tmp_path)
    pattern = capture(problem)
    assert pattern.kind == "graph", pattern.reason
    helpers = reference_init(problem.source, problem.load_module()).helpers
    assert helpers.index("from itertools import repeat") < helpers.index("def _ntuple") < helpers.index(
        "to_2tuple = _ntuple(2)") < helpers.index("class Block")
    assert "import collections.abc" in helpers and "\ncheckpoint =" not in helpers  # left unbound, as in the problem
    judged_correct(problem.path, {"template": "graph"}, tmp_path, monkeypatch)


@pytest.mark.parametrize("extra,reason", [
    ("SCALE = torch.randn(16)", "SCALE"),  # computed when loaded: a copy would draw other values
    ("import random as draws\nSCALE = draws.random()", "SCALE"),  # the import is copyable, the draw is not
])
def test_a_value_computed_when_the_problem_loads_is_not_copied(tmp_path, extra, reason):
    problem = _wild(tmp_path, extra, "\n        self.scale = nn.Parameter(torch.ones(16) * SCALE * rate)")
    pattern = capture(problem)
    assert pattern.kind == "unsupported" and reason in pattern.reason, pattern.reason
