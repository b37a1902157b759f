"""Which row operations may run key block by key block: a softmax between the two products of an
attention (with a scale and a mask between), recognised from the imported operators' kinds,
never a layer norm, whose row looks the same to the access relations."""

from __future__ import annotations

import pytest

from loopwise.memory.softmax_chains import operator_kind, softmax_chains

torch = pytest.importorskip("torch")


class _Attention(torch.nn.Module):
    """Llama's order: scores, scale, causal mask, a row operation, the value product."""

    def __init__(self, row: str) -> None:
        super().__init__()
        self.row = row

    def forward(self, q, k, v):
        s = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        scores = scores + torch.full((s, s), float("-inf")).triu(1)
        if self.row == "softmax":
            probs = scores.softmax(dim=-1)
        else:
            probs = torch.nn.functional.layer_norm(scores, (s,))
        return probs @ v


def _graph(row: str):
    from loopwise.memory.torch_import import import_module

    x = torch.zeros(1, 2, 16, 8)
    return import_module(_Attention(row).eval(), (x, x.clone(), x.clone()), name=f"attention-{row}").graph


def test_the_softmax_between_scaled_masked_scores_and_the_value_product_is_recognised():
    g = _graph("softmax")
    (chain,) = softmax_chains(g)
    by_name = {op.name: op for op in g.operators}
    kinds = [operator_kind(by_name[name]) for name in chain.operators]
    assert kinds == ["matmul", "mul", "add", "softmax", "matmul"]
    assert (chain.scores, chain.softmax, chain.mix) == (chain.operators[0], chain.operators[3], chain.operators[4])


def test_a_layer_norm_over_the_same_row_is_not_a_softmax_chain():
    g = _graph("layer_norm")
    assert any(operator_kind(op) == "layer_norm" and op.coupled for op in g.operators)
    assert softmax_chains(g) == []


def test_a_softmax_whose_probabilities_are_also_read_elsewhere_is_not_a_chain():
    """Key blocks never make the whole probability matrix, so a second reader rules them out."""
    from loopwise.memory.graph import Graph
    from loopwise.memory.ir import Operator, elementwise

    from .attention_graphs import fused_attention_ops

    scores, softmax, mix = fused_attention_ops(1, 2, 8, 4)
    named = [Operator(f"{kind}:{op.name}", op.dims, op.tensors, op.reads, op.writes, op.macs, op.coupled)
             for kind, op in zip(("matmul", "softmax", "matmul"), (scores, softmax, mix))]
    assert len(softmax_chains(Graph("attention", tuple(named)))) == 1
    spy = elementwise("mul:spy", (1, 2, 8, 8), ("P",), "Pcopy")
    assert softmax_chains(Graph("attention-read-twice", (*named, spy))) == []
