"""Composite operations (losses, instance norm) written out as primitive ones: the traced
graph computes what the model does, a call the rewrite does not cover stays as it was, and
forwards made of them get templates whose candidates are judged correct."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.fx_graph import trace_as_called
from loopwise.kernels.problem import load_problem

from expert_judging import generated_style_problem as _problem, judged_correct  # noqa: E402 - tests/kernels/expert on sys.path


class Call(nn.Module):
    """A model whose forward is ``fn`` (a function, or a module: then a submodule) of its one, two or
    three inputs (fx traces named parameters, not ``*args``)."""

    def __init__(self, fn, n=2):
        super().__init__()
        self.fn, self.n = fn, n

    def forward(self, a, b=None, c=None):
        return self.fn(*(a, b, c)[:self.n])


def _inputs(n, shape=(6, 9), positive=False):
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(*shape, generator=g) for _ in range(n)]
    if positive:
        xs = [x.softmax(dim=-1) for x in xs]
    xs[-1][0, 0] = xs[0][0, 0]  # a zero difference (a target of zero for the KL divergence after softmax: none)
    return xs


def _calls(gm):
    return {n.target for n in gm.graph.nodes if n.op in ("call_function", "call_module")}


LOSSES = [
    (lambda x, y: F.smooth_l1_loss(x, y), 2, False),
    (lambda x, y: F.smooth_l1_loss(x, y, reduction="sum", beta=0.5), 2, False),
    (lambda x, y: F.smooth_l1_loss(x, y, beta=0.0), 2, False),
    (lambda x, y: F.huber_loss(x, y, delta=0.7), 2, False),
    (lambda x, y: F.l1_loss(x, y, reduction="none"), 2, False),
    (lambda x, y: F.mse_loss(x, y), 2, False),
    (lambda x, y: F.kl_div(torch.log(x), y, reduction="batchmean"), 2, True),
    (lambda x, y: F.kl_div(torch.log(x), torch.log(y), reduction="sum", log_target=True), 2, True),
    (lambda x, y: F.kl_div(x, y), 2, True),
    (lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=0.5), 3, False),
    (lambda a, p, n: F.triplet_margin_loss(a, p, n, p=1, swap=True, reduction="none"), 3, False),
]


@pytest.mark.parametrize("index", range(len(LOSSES)))
def test_a_loss_written_out_computes_what_the_call_does(index):
    fn, n, positive = LOSSES[index]
    args = _inputs(n, positive=positive)
    model = Call(fn, n)
    gm = trace_as_called(model, args)
    assert not {F.smooth_l1_loss, F.huber_loss, F.l1_loss, F.mse_loss, F.kl_div, F.triplet_margin_loss} & _calls(gm)
    torch.testing.assert_close(gm(*args), model(*args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("module,n,positive", [
    (nn.SmoothL1Loss(beta=2.0), 2, False), (nn.HuberLoss(reduction="sum"), 2, False), (nn.L1Loss(), 2, False),
    (nn.MSELoss(reduction="none"), 2, False), (nn.KLDivLoss(reduction="batchmean"), 2, True),
    (nn.TripletMarginLoss(margin=2.0), 3, False), (nn.InstanceNorm2d(4), 1, False), (nn.InstanceNorm1d(4), 1, False),
])
def test_a_loss_or_instance_norm_module_written_out_computes_what_it_does(module, n, positive):
    shape = {nn.InstanceNorm2d: (2, 4, 5, 3), nn.InstanceNorm1d: (2, 4, 7)}.get(type(module), (6, 9))
    args = _inputs(n, shape, positive)
    if positive:
        args[0] = args[0].log()
    model = Call(module, n)
    gm = trace_as_called(model, args)
    assert not any(n.op == "call_module" for n in gm.graph.nodes), gm.code
    torch.testing.assert_close(gm(*args), model(*args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn,n", [
    (lambda x, y: F.mse_loss(x, y, size_average=False), 2),  # the deprecated options: left to PyTorch
    (lambda a, p, n: F.triplet_margin_loss(a, p, n, p=3), 3),
])
def test_a_call_the_rewrite_does_not_cover_stays(fn, n):
    args = _inputs(n, (6, 6))
    gm = trace_as_called(Call(fn, n), args)
    assert {F.mse_loss, F.triplet_margin_loss} & _calls(gm), gm.code


def test_an_instance_norm_with_affine_parameters_stays():
    gm = trace_as_called(Call(nn.InstanceNorm2d(4, affine=True), 1), _inputs(1, (2, 4, 5, 3)))
    assert any(n.op == "call_module" for n in gm.graph.nodes)


HUBER = "x = torch.nn.functional.smooth_l1_loss(x, y)"
INSTANCE = "x = self.norm(x)"


@pytest.mark.parametrize("name,init,forward,inputs,args", [
    ("huber", "", HUBER, "torch.randn(8, 40, dtype=DTYPE), torch.randn(8, 40, dtype=DTYPE)", "x, y"),
    ("instance", "self.norm = nn.InstanceNorm2d(3)", INSTANCE, "torch.rand(2, 3, 5, 7, dtype=DTYPE)", "x"),
])
def test_a_forward_of_a_loss_or_an_instance_norm_gets_a_template_judged_correct(tmp_path, monkeypatch, name, init,
                                                                                forward, inputs, args):
    from loopwise.kernels.expert.partition import kinds

    path = _problem(tmp_path, name, init, forward, inputs, args=args)
    pattern = capture(load_problem(str(path)))
    assert pattern.kind != "unsupported", pattern.reason
    template = kinds(pattern)[-1] if pattern.kind == "graph" else pattern.kind
    judged_correct(path, {"template": template}, tmp_path, monkeypatch)



@pytest.mark.parametrize("fn", [lambda x, y: F.smooth_l1_loss(x, y, reduction="none", beta=0.5),
                                lambda x, y: F.huber_loss(x, y, reduction="none", delta=0.5)])
def test_the_huber_losses_without_a_comparison_agree_at_the_threshold_and_on_nan(fn):
    x = torch.tensor([[0.5, -0.5, 0.0, 0.49, 0.51, float("nan"), 3.0, -7.25]])
    y = torch.zeros_like(x)
    model = Call(fn, 2)
    gm = trace_as_called(model, [x, y])
    torch.testing.assert_close(gm(x, y), model(x, y), rtol=1e-6, atol=1e-7, equal_nan=True)


def test_a_composite_call_on_half_tensors_stays():
    """In half precision PyTorch's fused losses and norms accumulate in float; the written-out
    operations would overflow (a triplet loss's squares past 65504), so the call stays."""
    args = [x.half() for x in _inputs(3, (4, 64))]
    gm = trace_as_called(Call(lambda a, p, n: F.triplet_margin_loss(a, p, n), 3), args)
    assert F.triplet_margin_loss in _calls(gm)


def test_composite_calls_one_after_another_are_all_written_out():
    args = _inputs(3, (2, 4, 5, 3))
    nested = Call(lambda a, b, c: F.l1_loss(F.mse_loss(a, b, reduction="none"), c), 3)
    gm = trace_as_called(nested, args)
    assert not {F.l1_loss, F.mse_loss} & _calls(gm)
    torch.testing.assert_close(gm(*args), nested(*args), rtol=1e-5, atol=1e-6)
    norms = Call(nn.Sequential(nn.InstanceNorm2d(4), nn.InstanceNorm2d(4)), 1)
    gm = trace_as_called(norms, args[:1])
    torch.testing.assert_close(gm(*args[:1]), norms(*args[:1]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("module,shape", [(nn.InstanceNorm2d(3), (3, 5, 6)), (nn.InstanceNorm3d(3), (3, 4, 5, 6)),
                                          (nn.InstanceNorm1d(3), (3, 7))])
def test_an_instance_norm_of_an_unbatched_input_normalizes_each_channel(module, shape):
    args = _inputs(1, shape)
    model = Call(module, 1)
    gm = trace_as_called(model, args)
    assert not any(n.op == "call_module" for n in gm.graph.nodes), gm.code
    torch.testing.assert_close(gm(*args), model(*args), rtol=1e-5, atol=1e-5)


def test_a_kl_divergence_keeps_pytorchs_nan_for_a_negative_target_and_its_zero_for_a_zero_one():
    a, b = _inputs(2, (4, 5))
    b[0, 0], b[0, 1] = 0.0, -0.5
    model = Call(lambda x, y: F.kl_div(x, y, reduction="none"), 2)
    gm = trace_as_called(model, [a, b])
    torch.testing.assert_close(gm(a, b), model(a, b), rtol=1e-6, atol=1e-6, equal_nan=True)
    assert gm(a, b)[0, 1].isnan() and gm(a, b)[0, 0] == model(a, b)[0, 0]


def test_a_batchmean_kl_divergence_of_zero_dimensional_inputs_is_its_sum():
    a, b = torch.tensor(-0.7), torch.tensor(0.3)
    model = Call(lambda x, y: F.kl_div(x, y, reduction="batchmean"), 2)
    gm = trace_as_called(model, [a, b])
    assert F.kl_div not in _calls(gm)
    torch.testing.assert_close(gm(a, b), model(a, b))


@pytest.mark.parametrize("module,shape", [
    (lambda x: F.glu(x), (6, 10)), (lambda x: F.glu(x, dim=1), (2, 8, 5)), (lambda x: F.glu(x, -2), (3, 4, 7)),
    (nn.GLU(dim=0), (4, 3)), (nn.GLU(), (2, 3, 6)),
])
def test_a_glu_written_out_is_the_first_half_times_the_sigmoid_of_the_second(module, shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    model = Call(module, 1)
    gm = trace_as_called(model, [x])
    assert F.glu not in _calls(gm) and not any(n.op == "call_module" for n in gm.graph.nodes), gm.code
    torch.testing.assert_close(gm(x), model(x), rtol=1e-6, atol=1e-7)


def test_a_forward_with_a_glu_gets_a_template_judged_correct(tmp_path, monkeypatch):
    from loopwise.kernels.expert.partition import kinds

    path = _problem(tmp_path, "glu", "", "x = torch.nn.functional.glu(torch.tanh(x), dim=1)",
                    "torch.randn(4, 10, 6, dtype=DTYPE)", args="x")
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == "graph", pattern.reason
    judged_correct(path, {"template": kinds(pattern)[0]}, tmp_path, monkeypatch)
