# Per-thread branch on the sign of random data (CUDA): in each warp about half the lanes take the
# long path (16 sines) while the others idle, so a warp executes with half its threads active.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
__global__ void branchy(const float* __restrict__ x, float* __restrict__ out, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i], y = v;
    if (v > 0.0f) {
        #pragma unroll 1
        for (int k = 0; k < 16; ++k) y = sinf(y) * 1.0001f;
    }
    out[i] = y;
}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty_like(x);
    long n = x.numel();
    branchy<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
CPP_SRC = "torch::Tensor run(torch::Tensor x);"

_ext = load_inline(name="loopwise_case_divergence", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["run"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.run(x.contiguous())
