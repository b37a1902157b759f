"""A forward that calls einops (``rearrange``, ``reduce``, ``repeat``) is traced: each call enters
the graph as the torch operations it stands for, so the problem gets a template and the candidate,
with no einops in it, is right."""

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.fx_graph import trace_as_called
from loopwise.kernels.problem import load_problem

from expert_judging import judged_correct  # noqa: E402 - tests/kernels/expert on sys.path

pytest.importorskip("einops")

# Mamba2's segment sum, on blocks that einops cuts out of the sequence; the mask made with
# ``dtype=bool`` (a Python type where a dtype goes)
PROBLEM = '''
import torch
import torch.nn as nn
from einops import rearrange, reduce, repeat


class Model(nn.Module):
    def __init__(self, block_len):
        super().__init__()
        self.block_len = block_len

    def forward(self, x):
        x = rearrange(x, "b (c l) h -> b h c l", l=self.block_len)
        cs = torch.cumsum(x, dim=-1)
        seg = cs[..., :, None] - cs[..., None, :]
        mask = torch.tril(torch.ones(self.block_len, self.block_len, device=x.device, dtype=bool))
        seg = seg.masked_fill(~mask, -torch.inf)
        y = torch.exp(seg).sum(-1) * 2.0 + 1.0
        y = reduce(y, "b h c l -> b h l", "max")
        return repeat(y, "b h l -> b h l r", r=2)


def get_inputs():
    return [torch.randn(2, 12, 3) * 0.5]


def get_init_inputs():
    return [4]
'''


@pytest.fixture()
def problem_path(tmp_path):
    path = tmp_path / "segsum_einops.py"
    path.write_text(PROBLEM)
    return path


def test_einops_calls_are_traced_as_torch_operations(problem_path):
    import torch

    module = load_problem(str(problem_path)).load_module()
    model = module.Model(*module.get_init_inputs())
    args = module.get_inputs()
    gm = trace_as_called(model, args)
    assert "einops" not in gm.code and "rearrange" not in gm.code, gm.code
    assert {"reshape", "permute"} <= {str(n.target) for n in gm.graph.nodes if n.op == "call_method"}, gm.code
    assert torch.equal(gm(*args), model(*args))


@pytest.mark.slow
def test_a_forward_with_einops_gets_a_template_whose_candidate_is_right(problem_path, tmp_path, monkeypatch):
    pattern = capture(load_problem(str(problem_path)))
    assert pattern.kind != "unsupported", pattern.reason
    source = judged_correct(problem_path, {"template": "graph_norm"}, tmp_path, monkeypatch)
    assert "einops" not in source
