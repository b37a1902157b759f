"""Attention read out of one fused projection output, as the memory tests build it: the operators
QK^T, softmax over the keys and PV, over QKV[b, j, 3*H*D] with Q at ``D*h + d``, K at
``H*D + D*h + d`` and V at ``2*H*D + D*h + e`` (GPT-2's imported attention)."""

from __future__ import annotations

from loopwise.memory.ir import Access, Operator, Tensor


def fused_attention_ops(b: int, h: int, m: int, d: int) -> tuple[Operator, Operator, Operator]:
    """(scores, softmax, mix) over QKV [b, m, 3*h*d], writing O [b, h, m, d]."""
    act = lambda name, *shape: Tensor(name, shape)  # noqa: E731
    c = h * d
    qkv = act("QKV", b, m, 3 * c)
    scores = Operator("scores", {"b": b, "h": h, "i": m, "j": m, "d": d}, (qkv, act("S", b, h, m, m)),
                      reads=(Access("QKV", ("b", "i", f"{d}*(h) + (d)")),
                             Access("QKV", ("b", "j", f"{c} + {d}*(h) + (d)"))),
                      writes=(Access("S", ("b", "h", "i", "j")),), macs=b * h * m * m * d)
    softmax = Operator("softmax", {"b": b, "h": h, "i": m, "j": m}, (act("S", b, h, m, m), act("P", b, h, m, m)),
                       reads=(Access("S", ("b", "h", "i", "j")),), writes=(Access("P", ("b", "h", "i", "j")),),
                       coupled=frozenset({"j"}))
    mix = Operator("mix", {"b": b, "h": h, "i": m, "e": d, "j": m},
                   (act("P", b, h, m, m), qkv, act("O", b, h, m, d)),
                   reads=(Access("P", ("b", "h", "i", "j")), Access("QKV", ("b", "j", f"{2 * c} + {d}*h + e"))),
                   writes=(Access("O", ("b", "h", "i", "e")),), macs=b * h * m * m * d)
    return scores, softmax, mix
