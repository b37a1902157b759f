"""Why the MoE forward candidates failed the strict tolerance on the H200, and whether rounding
where the reference rounds fixes it, checked on the CPU.

The candidate's numerics are emulated in float64 (exact sums, so only the rounding points differ
from the reference): once with fp32 intermediates (gate, up, silu(gate) and each expert's output
kept unrounded, as the candidates were before f045dd5) and once rounded to bf16 where the bf16
reference rounds them. Each is compared with the reference loop (bf16, on the CPU) at the judge's
strict tolerance, atol = rtol = 0.01, on one routing pattern at the problem's full size.

    python bench/moe_rounding_proxy.py single      # uniform | skewed | duplicate | single
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

PROBLEM = Path(__file__).resolve().parent.parent / "loopwise" / "kernels" / "examples" / "moe" / "moe_forward.py"


def emulate(model, x, ids, weights, rounded: bool) -> torch.Tensor:
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for e in range(model.gate_up.shape[0]):
        token, slot = (ids == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        gate, up = (x[token].double() @ model.gate_up[e].double()).chunk(2, dim=-1)
        if rounded:
            gate, up = gate.bfloat16().double(), up.bfloat16().double()
            silu = (gate * torch.sigmoid(gate)).bfloat16().double()
        else:
            silu = gate * torch.sigmoid(gate)
        y = (silu * up).bfloat16().double() @ model.down[e].double()
        if rounded:
            y = y.bfloat16().double()
        out.index_add_(0, token, y * weights[token, slot].double()[:, None])
    return out.bfloat16()


def main(pattern: str) -> int:
    spec = importlib.util.spec_from_file_location("moe_forward", PROBLEM)
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    torch.manual_seed(0)
    model = problem.Model()
    ids, weights = problem.routes(pattern=pattern)
    x = torch.randn(problem.TOKENS, problem.HIDDEN).to(torch.bfloat16)
    with torch.no_grad():
        reference = model(x, ids, weights).float()
        for rounded in (False, True):
            got = emulate(model, x, ids, weights, rounded).float()
            error = (got - reference).abs()
            bad = int((error > 0.01 + 0.01 * reference.abs()).sum())
            name = "rounded where the reference rounds" if rounded else "fp32 intermediates"
            print(f"{pattern:9s} {name:36s} {bad:4d} of {reference.numel()} outside atol=rtol=0.01, "
                  f"max abs error {error.max().item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "single"))
