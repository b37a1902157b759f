"""MoE expert block, forward and backward (bf16): the forward of moe_forward.py, then the gradients
of the tokens and of both expert weight banks for a given output gradient, as a training step
needs them. Same sizes (a Qwen3-30B-A3B layer on 4096 tokens) and the same four routing patterns,
duplicate routes included. The reference is the plain PyTorch loop over experts with autograd.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS, HIDDEN, INTERMEDIATE, EXPERTS, TOP_K = 4096, 2048, 768, 128, 8


class Model(nn.Module):
    def __init__(self, hidden=HIDDEN, intermediate=INTERMEDIATE, experts=EXPERTS):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.gate_up = nn.Parameter((torch.randn(experts, hidden, 2 * intermediate, generator=g)
                                     * hidden ** -0.5).to(torch.bfloat16))
        self.down = nn.Parameter((torch.randn(experts, intermediate, hidden, generator=g)
                                  * intermediate ** -0.5).to(torch.bfloat16))

    def forward(self, x, topk_ids, topk_weights, grad_out):
        """Returns (output, d x, d gate_up, d down)."""
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
            for e in range(self.gate_up.shape[0]):
                token, slot = (topk_ids == e).nonzero(as_tuple=True)
                if token.numel() == 0:
                    continue
                gate, up = (x[token] @ self.gate_up[e]).chunk(2, dim=-1)
                y = (F.silu(gate) * up) @ self.down[e]
                out = out.index_add(0, token, y.float() * topk_weights[token, slot].float()[:, None])
            out = out.to(x.dtype)
            dx, dgu, dd = torch.autograd.grad(out, (x, self.gate_up, self.down), grad_out)
        return out.detach(), dx, dgu, dd


def routes(tokens=TOKENS, experts=EXPERTS, top_k=TOP_K, pattern=None):
    """Expert ids [tokens, top_k] (int64) and weights [tokens, top_k] (fp32, rows sum to 1)."""
    if pattern is None:
        pattern = ("uniform", "skewed", "duplicate", "single")[int(torch.randint(0, 4, (), device="cpu"))]
    if pattern == "uniform":
        ids = torch.rand(tokens, experts).argsort(dim=1)[:, :top_k]
    elif pattern == "skewed":
        hot = torch.randperm(experts)[: max(top_k, experts // 8)]
        ids = hot[torch.rand(tokens, hot.numel()).argsort(dim=1)[:, :top_k]]
    elif pattern == "duplicate":
        ids = torch.randint(0, experts, (tokens, top_k))
        ids[:, 1] = ids[:, 0]  # every token routes twice to one expert
    elif pattern == "single":
        ids = torch.full((tokens, top_k), int(torch.randint(0, experts, (), device="cpu")))
    else:
        raise ValueError(pattern)
    weights = torch.softmax(torch.randn(tokens, top_k), dim=1)
    return ids.long(), weights


def get_inputs():
    ids, weights = routes()
    return [torch.randn(TOKENS, HIDDEN).to(torch.bfloat16), ids, weights,
            torch.randn(TOKENS, HIDDEN).to(torch.bfloat16)]


def get_init_inputs():
    return []
