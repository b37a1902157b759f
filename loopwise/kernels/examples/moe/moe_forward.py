"""MoE expert block, forward (bf16): top-k routing, grouped SwiGLU experts, weighted combine.

Sizes of a Qwen3-30B-A3B layer (hidden 2048, 128 experts of intermediate 768, top-8) on 4096
tokens. The routes come as inputs, as a trainer's router would hand them over, in one of four
patterns drawn per call: uniform, skewed (a few hot experts, many empty ones), duplicate (a token
sends two of its k slots to the same expert, which must count twice) and one expert for every token.
The reference is the plain PyTorch loop over experts.
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

    def forward(self, x, topk_ids, topk_weights):
        out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
        for e in range(self.gate_up.shape[0]):
            token, slot = (topk_ids == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            gate, up = (x[token] @ self.gate_up[e]).chunk(2, dim=-1)
            y = (F.silu(gate) * up) @ self.down[e]
            out.index_add_(0, token, y.float() * topk_weights[token, slot].float()[:, None])
        return out.to(x.dtype)


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
    return [torch.randn(TOKENS, HIDDEN).to(torch.bfloat16), ids, weights]


def get_init_inputs():
    return []
