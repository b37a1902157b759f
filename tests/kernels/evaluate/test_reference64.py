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
