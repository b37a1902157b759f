"""PyTorch models into the memory IR through torch.export on the meta device: the zoo's networks
with the parameter counts their authors publish, copies folded, nothing dropped silently."""

from __future__ import annotations

import itertools
import math
import re

import pytest
import torch

from loopwise.errors import UserError
from loopwise.memory.planner import plan
from loopwise.memory.torch_import import import_module, load_torch
from loopwise.memory.views import reshape_map


def _index(exprs, env):
    out = []
    for e in exprs:
        # ISL's floor(a/b) is Python's a // b
        py = re.sub(r"floor\(\((.*)\)/(\d+)\)", r"((\1)//\2)", e).replace(" mod ", " % ")
        py = re.sub(r"floor\((.*)/(\d+)\)", r"((\1)//\2)", py)
        out.append(eval(py, {}, env))
    return tuple(out)


@pytest.mark.parametrize("src,view", [((2, 3, 12), (2, 3, 3, 4)), ((6, 4), (2, 3, 4)), ((2, 3, 4), (6, 4)),
                                      ((4, 6), (6, 4)), ((2, 1, 6), (2, 6)), ((12,), (3, 1, 4))])
def test_reshape_maps_every_view_index_to_the_same_element(src, view):
    to_src = reshape_map(src, view)
    names = [f"v{j}" for j in range(len(view))]
    for point in itertools.product(*(range(n) for n in view)):
        linear = sum(i * math.prod(view[j + 1:]) for j, i in enumerate(point))
        expected = tuple(linear // math.prod(src[j + 1:]) % src[j] for j in range(len(src)))
        assert _index(to_src(tuple(names)), dict(zip(names, point))) == expected


def test_a_split_of_the_last_dimension_is_a_plain_affine_index():
    to_src = reshape_map((2, 128, 768), (2, 128, 12, 64))
    assert [e.replace("(", "").replace(")", "") for e in to_src(("b", "s", "h", "d"))] == ["b", "s", "64*h + d"]


def test_resnet50_imports_with_batch_norms_folded_into_its_convolutions():
    imported = load_torch("zoo:resnet50", batch=1)
    g = imported.graph
    kinds = [op.name.split(":")[0] for op in g.operators]
    assert kinds.count("convolution") == 53 and kinds.count("linear") == 1 and kinds.count("add") == 16
    assert imported.folded.count("batch_norm") == 53 and imported.unsupported == {}
    params = sum(math.prod(g.tensors()[w].shape) for w in g.weights)
    # torchvision's 25,557,032 parameters, less each BatchNorm's 2 per channel, plus the folded bias (1)
    channels = sum(g.tensors()[w].shape[0] for w in g.weights if w.endswith("_folded_bias"))
    assert params == 25_557_032 - channels
    assert g.compulsory_bytes() == (params + 3 * 224 * 224 + 1000) * 2


def test_bert_attention_keeps_its_products_and_a_softmax_whose_row_is_coupled():
    pytest.importorskip("transformers")
    imported = load_torch("zoo:bert-base", batch=2, seq=32)
    g = imported.graph
    matmuls = [op for op in g.operators if op.name.startswith("matmul:")]
    softmax = [op for op in g.operators if op.name.startswith("softmax:")]
    assert len(matmuls) == 24 and len(softmax) == 12
    assert all(op.coupled == {"d3"} and op.dims["d3"] == 32 for op in softmax)
    # the attention mask is built from arange alone: recomputed where read, never stored
    assert imported.generated and not any(op.name.startswith(("where:", "arange:")) for op in g.operators)
    assert set(imported.folded) >= {"view", "transpose", "dropout"}


def test_unknown_models_and_impossible_sizes_are_one_line_errors():
    with pytest.raises(UserError, match="unknown model"):
        load_torch("zoo:alexnet")
    with pytest.raises(UserError, match="at least 1"):
        load_torch("zoo:resnet50", batch=0)


def test_concatenation_and_padding_are_folded_into_their_readers():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from loopwise.memory.polyhedral import footprint
    from loopwise.memory.torch_import import import_module

    class Branches(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 8, 1, bias=False), nn.Conv2d(3, 4, 3, padding=1, bias=False)
            self.c = nn.Conv2d(12, 5, 1, bias=False)

        def forward(self, x):
            y = torch.cat([self.a(x), self.b(x)], dim=1)  # 12 channels, from two producers
            return self.c(F.pad(y, (2, 2, 1, 1)))  # zero rows and columns around it

    with torch.device("meta"):
        imported = import_module(Branches().eval(), (torch.zeros(1, 3, 10, 10),), name="branches")
    g = imported.graph
    assert imported.unsupported == {} and {"cat", "pad"} <= set(imported.folded)
    (c,) = [op for op in g.operators if op.writes[0].tensor in g.outputs()]
    assert c.dims["p"] == 12 and c.dims["q"] == 14  # the padded map
    reads = {a.tensor for a in c.reads if a.tensor not in g.weights}
    assert len(reads) == 2  # both producers' outputs, no concatenated copy
    # every element of both parts is read once; the padding is no element
    assert sum(footprint(c, t, {}) for t in reads) == 12 * 10 * 10
    assert g.compulsory_bytes() == (3 * 100 + 8 * 3 + 4 * 3 * 9 + 5 * 12 + 5 * 12 * 14) * 2


@pytest.mark.parametrize("inplace", [False, True])
def test_eval_mode_dropout_is_folded_also_in_place(inplace):
    """torchvision's EfficientNet classifier has nn.Dropout(inplace=True), which exports as
    aten.dropout_: at inference it is the identity, folded like the out-of-place one (it was counted
    as an unsupported operator)."""
    def mlp(dropout: bool):
        layers = [torch.nn.Linear(16, 32)] + ([torch.nn.Dropout(0.2, inplace=inplace)] if dropout else [])
        return torch.nn.Sequential(*layers, torch.nn.Linear(32, 8)).to("meta").eval()

    x = (torch.empty(4, 16, device="meta"),)
    with_dropout, without = import_module(mlp(True), x), import_module(mlp(False), x)
    assert with_dropout.unsupported == {}
    assert len(with_dropout.graph.operators) == len(without.graph.operators) == 2
    assert plan(with_dropout.graph, 1 << 20).total_bytes == plan(without.graph, 1 << 20).total_bytes


def test_a_returned_concatenation_is_stored_whole():
    """A decode step returns its key cache grown by one token, ``torch.cat([past, new])``: the
    returned tensor holds the past keys too, so all of it goes to DRAM, in the plan and the bound."""
    class Decode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = torch.nn.Linear(64, 64, bias=False)

        def forward(self, x, past):
            return torch.cat([past, self.k(x)], dim=1)  # [1, 256 + 1, 64]

    with torch.device("meta"):
        imported = import_module(Decode(), (torch.zeros(1, 1, 64), torch.zeros(1, 256, 64)), name="decode")
    g = imported.graph
    stored = (257 * 64) * 2
    assert sum(g.nbytes(t) for t in g.outputs()) == stored
    assert g.compulsory_bytes() == (64 + 256 * 64 + 64 * 64) * 2 + stored
    assert plan(g, 1 << 20).total_bytes >= g.compulsory_bytes()


def test_a_returned_input_or_view_of_one_is_stored_once():
    class Passthrough(torch.nn.Module):
        def forward(self, x):
            return x, x.transpose(0, 1), torch.relu(x)

    with torch.device("meta"):
        g = import_module(Passthrough(), (torch.zeros(4, 8),), name="passthrough").graph
    assert len(g.outputs()) == 3 and g.compulsory_bytes() == 4 * 32 * 2


def _all_tensors_bytes(g):
    return sum(g.nbytes(t) for t in g.tensors())


def test_an_operator_without_a_model_is_counted_at_all_its_inputs_and_outputs():
    """Decode attention, ``F.scaled_dot_product_attention`` of one query over 4096 keys, is not
    modelled: it must still read every key and value, in the plan and in the compulsory bound."""
    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    q, k, v = torch.zeros(1, 32, 1, 128), torch.zeros(1, 32, 4096, 128), torch.zeros(1, 32, 4096, 128)
    with torch.device("meta"):
        imported = import_module(Attention(), (q, k, v), name="decode-attention")
    g = imported.graph
    assert imported.unsupported == {"scaled_dot_product_attention": 1}
    every = (2 * 32 * 128 + 2 * 32 * 4096 * 128) * 2  # q and the output, k and v
    assert _all_tensors_bytes(g) == every and g.compulsory_bytes() == every
    assert g.layer_by_layer_floor_bytes() == every
    assert plan(g, 24 << 20).total_bytes >= every


@pytest.mark.parametrize("reduce,keep", [(lambda x: x.pow(2).mean(-1, keepdim=True), (1, 64, 1)),
                                         (lambda x: x.sum(dim=(0, 2)), (64,)),
                                         (lambda x: x.amax(-1), (1, 64)),
                                         (lambda x: x.mean(), ())])
def test_reductions_are_modelled_and_read_their_whole_input(reduce, keep):
    class Reduce(torch.nn.Module):
        def forward(self, x):
            return reduce(x)

    with torch.device("meta"):
        imported = import_module(Reduce(), (torch.zeros(1, 64, 256),), name="reduce")
    g = imported.graph
    assert imported.unsupported == {}
    red = g.operators[-1]
    assert red.dims == {"d0": 1, "d1": 64, "d2": 256}
    assert g.compulsory_bytes() == (64 * 256 + math.prod(keep)) * 2


def test_rmsnorm_moves_its_whole_input():
    class RMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(4096))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    with torch.device("meta"):
        g = import_module(RMSNorm(), (torch.zeros(1, 2048, 4096),), name="rmsnorm").graph
    x = 2048 * 4096 * 2
    assert g.compulsory_bytes() == 2 * x + 4096 * 2
    assert plan(g, 24 << 20).total_bytes >= 2 * x


def test_a_concatenation_returned_twice_is_copied_once():
    class Twice(torch.nn.Module):
        def forward(self, a, b):
            c = torch.cat([a, b], dim=0)
            return c, c

    with torch.device("meta"):
        g = import_module(Twice(), (torch.zeros(2, 8), torch.zeros(3, 8)), name="twice").graph
    assert [op.name.split(":")[0] for op in g.operators] == ["copy"]
    assert g.compulsory_bytes() == (2 * 8 + 3 * 8 + 5 * 8) * 2


@pytest.mark.parametrize("name,params", [("vit_b16", 86_567_656), ("convnext_t", 28_589_128)])
def test_vit_and_convnext_import_whole_with_their_published_parameter_counts(name, params):
    imported = load_torch(f"zoo:{name}", batch=1)
    g = imported.graph
    assert imported.unsupported == {}
    assert sum(math.prod(g.tensors()[w].shape) for w in g.weights) == params


def test_unet_transposed_convolutions_and_skip_concatenations_are_modelled():
    imported = load_torch("zoo:unet_small", batch=1)
    kinds = [op.name.split(":")[0] for op in imported.graph.operators]
    assert imported.unsupported == {} and kinds.count("convolution") == 23  # 18 3x3, 4 transposed, 1 head
    assert imported.folded.count("cat") == 4


def test_llama_layer_in_prefill_and_decode_stores_the_grown_caches():
    layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    prefill = load_torch("zoo:llama7b_layer_prefill", batch=1, seq=64)
    decode = load_torch("zoo:llama7b_layer_decode", batch=2, seq=128)
    for imported in (prefill, decode):
        g = imported.graph
        assert imported.unsupported == {}
        assert sum(math.prod(g.tensors()[w].shape) for w in g.weights) == layer
    assert prefill.graph.name == "llama7b_layer_prefill-b1-s64" and decode.graph.name == "llama7b_layer_decode-b2-s128"
    cache = 2 * 32 * 128 * 128  # batch 2: keys and values in, each grown by a position out
    grown = 2 * 32 * 129 * 128
    assert decode.graph.compulsory_bytes() == 2 * (layer + 2 * 2 * 4096 + 2 * cache + 2 * grown)  # x in, y out


def test_a_transposed_convolution_is_a_convolution_with_an_affine_write():
    import torch.nn as nn

    with torch.device("meta"):
        m, x = nn.ConvTranspose2d(8, 4, 2, 2), torch.zeros(1, 8, 4, 4)
    imported = import_module(m, (x,))
    (op,) = imported.graph.operators
    assert imported.unsupported == {} and op.name.startswith("convolution:") and op.macs == 4 * 8 * 4 * 4 * 2 * 2


def test_a_decode_layer_grown_cache_plan_passes_the_replay():
    from loopwise.memory.verify import describe, verify

    g = load_torch("zoo:llama7b_layer_decode", batch=1, seq=256).graph
    p = plan(g, capacity_bytes=1 << 20)
    verdict = verify({"total_bytes": p.total_bytes, "schedule": p.schedule})
    assert verdict.ok, "\n".join(describe(verdict))
