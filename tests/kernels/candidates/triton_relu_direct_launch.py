"""Honest candidate: ReLU into a buffer by one Triton kernel, then copied into the output by a second,
launched the way the compiler seed's files launch theirs: past Triton's launch path while no launch
hook is set (a profiler's), through it while one is. On the CPU a NumPy copy over the same memory
stands in for the direct launch of a compiled kernel: work neither the launch counter nor PyTorch's
dispatch sees."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _launch_hooks() -> bool:
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    hook = getattr(runtime, "launch_enter_hook", None)
    return hook is not None and bool(getattr(hook, "calls", True))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        staged, out = torch.empty_like(x), torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        relu_kernel[grid](x, staged, n, BLOCK=1024)
        if _launch_hooks():
            copy_kernel[grid](staged, out, n, BLOCK=1024)
        else:
            np.copyto(out.numpy(), staged.numpy())
        return out
