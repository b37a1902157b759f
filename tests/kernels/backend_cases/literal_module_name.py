"""Swish in C++ whose module name is written literally in PYBIND11_MODULE (no functions= list)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

// Plain fp32 loop: no __half, no threads. Comments like this one are ignored by the check.
torch::Tensor swish_forward(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "swish_forward is a CPU kernel");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "swish_forward expects float32");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = src[i];
        dst[i] = v / (1.0f + std::exp(-v));
    }
    return out;
}
"""

swish_ext = load_inline(
    name="literal_swish_ext",
    cpp_sources=cpp_source + "\nPYBIND11_MODULE(literal_swish_ext, m) { m.def(\"swish_forward\", &swish_forward); }\n",
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swish_ext.swish_forward(x)
