"""The zoo's attention models in plain torch, with their authors' shapes: ViT-B/16 and one
Llama-7B-shaped decoder layer, in prefill (a whole prompt) and in decode (one new token beside a
key/value cache, the layer returning the grown caches).

Attention is written out (two matrix products and a softmax) so that each is an operator of its
own; the causal mask and the rotary angles are computed from ``arange`` and are not stored.
"""

from __future__ import annotations

LLAMA = {"dim": 4096, "heads": 32, "hidden": 11008, "eps": 1e-6}


def vit_b16():
    """ViT-B/16 at 224x224: 16x16 patches, 12 layers of width 768, 12 heads, MLP 3072, 1000 classes."""
    import torch
    import torch.nn as nn

    dim, heads, depth = 768, 12, 12

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2, self.act = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim), nn.GELU()

        def forward(self, x):
            b, n, _ = x.shape
            qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = (q * (dim // heads) ** -0.5) @ k.transpose(-2, -1)
            y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, dim)
            x = x + self.proj(y)
            return x + self.fc2(self.act(self.fc1(self.norm2(x))))

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, dim, 16, 16)
            self.cls = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos = nn.Parameter(torch.zeros(1, 197, dim))
            self.blocks = nn.Sequential(*(Block() for _ in range(depth)))
            self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 1000)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            return self.head(self.norm(self.blocks(x))[:, 0])

    return ViT()


def _llama_parts():
    """RMSNorm, the rotary embedding and the SwiGLU MLP of a Llama layer."""
    import torch
    import torch.nn as nn

    class RMSNorm(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + LLAMA["eps"]))

    def rotate(x, start: int):
        """Rotary position embedding of ``x`` ``[b, h, s, d]`` at positions ``start, start+1, ...``."""
        d, s = x.shape[-1], x.shape[-2]
        inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
        positions = torch.arange(start, start + s, dtype=torch.float32, device=x.device)
        angles = (positions[:, None] * inv[None, :]).repeat(1, 2)
        half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
        return x * angles.cos() + half * angles.sin()

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dim, hidden = LLAMA["dim"], LLAMA["hidden"]
            self.gate = nn.Linear(dim, hidden, bias=False)
            self.up = nn.Linear(dim, hidden, bias=False)
            self.down = nn.Linear(hidden, dim, bias=False)

        def forward(self, x):
            return self.down(nn.functional.silu(self.gate(x)) * self.up(x))

    return RMSNorm, rotate, MLP


def llama7b_layer(decode: bool):
    """One Llama-7B decoder layer (width 4096, 32 heads of 128, SwiGLU MLP 11008, RMSNorm). In
    prefill it takes ``x [b, s, 4096]`` under a causal mask; in decode it takes one token
    ``x [b, 1, 4096]`` and caches ``[b, 32, s, 128]``, and returns ``(y, keys, values)`` with the
    caches grown by the token (``torch.cat``)."""
    import torch
    import torch.nn as nn

    RMSNorm, rotate, MLP = _llama_parts()
    dim, heads = LLAMA["dim"], LLAMA["heads"]
    head_dim = dim // heads

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
            self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
            self.mlp = MLP()

        def _heads(self, t):
            b, s, _ = t.shape
            return t.view(b, s, heads, head_dim).transpose(1, 2)

        def forward(self, x, keys=None, values=None):
            b, s, _ = x.shape
            start = 0 if keys is None else keys.shape[2]
            h = self.norm1(x)
            q, k, v = (rotate(self._heads(self.q(h)), start), rotate(self._heads(self.k(h)), start),
                       self._heads(self.v(h)))
            if keys is not None:
                k, v = torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2)
            scores = (q @ k.transpose(-2, -1)) * head_dim ** -0.5
            if keys is None:
                mask = torch.full((s, s), float("-inf"), device=x.device).triu(1)
                scores = scores + mask
            y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, dim)
            x = x + self.o(y)
            x = x + self.mlp(self.norm2(x))
            return (x, k, v) if keys is not None else x

    return Layer()
