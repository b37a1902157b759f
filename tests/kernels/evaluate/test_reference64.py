"""The judge's float64 reference: the Model run with its parameters and floating inputs in float64.
Tensors the forward makes itself in the default dtype (a mask from ``torch.zeros(..., device=...)``)
are made in float64 too, or the "float64" reference mixes precisions and its own error, which the
fp32 rule scales into an allowance, means nothing."""

from __future__ import annotations

import types

import torch

from loopwise.kernels.evaluate.reference import Reference

SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, q, k, v):
        mask = torch.zeros(q.shape[-2], k.shape[-2], device=q.device)
        mask[3] = torch.finfo(torch.float32).min
        scale = torch.tensor(0.3, device=q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * scale + torch.full((1,), 0.1, device=q.device)


def get_inputs():
    return [torch.randn(2, 3, 17, 16), torch.randn(2, 3, 23, 16), torch.randn(2, 3, 23, 16)]


def get_init_inputs():
    return []
'''


def _reference() -> Reference:
    module = types.ModuleType("masked_attention")
    exec(compile(SOURCE, "masked_attention", "exec"), module.__dict__)
    return Reference(module, "cpu", SOURCE)


def test_tensors_the_forward_makes_are_float64_in_the_float64_run():
    ref = _reference()
    args = ref.draw(0)
    (out32,), _ = ref.run(args)
    (out64,) = ref.run64(args)
    assert out64.dtype == torch.float64
    # the float64 run agrees with the fp32 one to fp32's rounding, the masked row included
    assert float((out64 - out32.double()).abs().max()) < 1e-5


def test_the_default_dtype_is_back_after_the_float64_run():
    ref = _reference()
    ref.run64(ref.draw(0))
    assert torch.get_default_dtype() == torch.float32


def _reference_of(forward: str, inputs: str) -> Reference:
    source = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x, idx):\n"
              f"        {forward}\n\n\ndef get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return []\n")
    module = types.ModuleType("problem")
    exec(compile(source, "problem", "exec"), module.__dict__)
    return Reference(module, "cpu", source)


def test_a_float64_run_that_computes_another_function_is_not_used():
    # torch.finfo() reads the default dtype: in a float64 run it is float64's eps, so log(eps) at
    # every x <= 0 is -36.04 where the problem gives -15.94. An error of the fp32 reference this
    # large is no rounding: a "float64 reference" of another function would scale the fp32
    # allowance until a wrong candidate passed.
    ref = _reference_of("return torch.log(torch.clamp(torch.relu(x), min=torch.finfo().eps)) + 0 * idx.sum()",
                        "[torch.randn(4096), torch.zeros(1, dtype=torch.int64)]")
    args = ref.draw(0)
    (out32,), _ = ref.run(args)
    assert ref.float64(0, args, [out32]) is None
    assert "another function" in ref.model64_error


def test_a_forward_that_casts_to_fp32_itself_still_gets_a_float64_run():
    # x.float() meets a default-dtype tensor in a dtype-strict op: with the default dtype at
    # float64 it raises; the float64 run is made with the default dtype as it was instead.
    ref = _reference_of("out = torch.zeros(64, device=x.device)\n        return out.index_add_(0, idx, x.float())",
                        "[torch.randn(64), torch.randperm(64)]")
    args = ref.draw(0)
    (out32,), _ = ref.run(args)
    (out64,) = ref.float64(0, args, [out32])
    assert float((out64.double() - out32.double()).abs().max()) < 1e-5
    assert ref.model64_error is None  # the first attempt's error is not what the run reports


def test_a_float64_run_judged_implausible_is_not_run_again_for_the_same_draw(monkeypatch):
    """The judgement holds for the draw (the same model, the same inputs): with reuse on, as a
    usable run is kept, the refusal is kept too, and a later request gets it without a float64
    forward; without reuse nothing is kept."""
    for reuse, runs_expected in ((True, 1), (False, 2)):
        ref = _reference_of("return torch.log(torch.clamp(torch.relu(x), min=torch.finfo().eps)) + 0 * idx.sum()",
                            "[torch.randn(4096), torch.zeros(1, dtype=torch.int64)]")
        ref.reuse = reuse
        args = ref.draw(0)
        (out32,), _ = ref.run(args)
        runs = []
        run64 = ref.run64
        monkeypatch.setattr(ref, "run64", lambda a, **kw: runs.append(1) or run64(a, **kw))
        assert ref.float64(0, args, [out32]) is None and ref.float64(0, args, [out32]) is None
        assert len(runs) == runs_expected, reuse
