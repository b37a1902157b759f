"""The recurrent detector: a forward that is one nn.LSTM, nn.GRU or nn.RNN on its inputs, whose results
it only selects from (tuple items, indexing such as the last time step; KernelBench L3/36, 37, 39-42).
A forward that computes more with them (L3/38's Linear on the last step) is a partitioned one: there
the module is a part of the norm plan, and the GEMM plans leave it to cuDNN beside their own GEMMs,
so the search measures the two as siblings."""

from __future__ import annotations

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import graph_inputs
from loopwise.kernels.expert.partition.recurrent import call_arguments, recurrent_module, recurrent_op, recurrent_parts
from loopwise.kernels.expert.partition.rewrite import pytorch_ops, rewrite_forward
from loopwise.kernels.expert.pattern import Pattern


def detect_recurrent(gm, model, args) -> Pattern | None:
    """The recurrent module as Triton kernels (templates/_recurrent.j2), the selections of its
    results left in PyTorch as written; work the output does not depend on is dropped; ``steps``,
    the sequence's time steps, counts the launches of the template launched once a step. None when the
    forward is anything else (a partitioned forward then makes the module one part among others).

    Raises:
        ew.Unsupported: the module is one the recurrent kernels do not compute (the reason says why).
    """
    import copy

    import torch

    live = _live(gm)
    calls = [n for n in gm.graph.nodes if n in live and n.op not in ("placeholder", "output", "get_attr")]
    recurrent = [n for n in calls if recurrent_module(gm, n) is not None]
    if len(recurrent) != 1 or not all(_selects(n) for n in calls if n is not recurrent[0]):
        return None
    (node,) = recurrent
    given, placeholders = call_arguments(node), graph_inputs(gm)
    x, hx = given.get("input"), given.get("hx")
    state = list(hx) if isinstance(hx, (tuple, list)) else [] if hx is None else [hx]
    if x not in placeholders or not all(s in placeholders for s in state) or len(node.args) > 2 \
            or set(given) - {"input", "hx"}:
        return None
    sequence = args[placeholders.index(x)]
    if not isinstance(sequence, torch.Tensor):
        return None
    sub = recurrent_module(gm, node)
    op, why = recurrent_op(sub, str(sequence.dtype).removeprefix("torch."), sequence.dim(), hx)
    if op is None:
        raise ew.Unsupported(why)
    written = copy.deepcopy(gm)
    (twin,) = [n for n in written.graph.nodes if n.name == node.name]
    forward, _, imports = rewrite_forward(written, [], (), recurrent_parts({twin: op}))
    weights = tuple(f"{node.target}.{name}" for name, _ in sub.named_parameters())
    steps = sequence.shape[1] if op.batch_first and sequence.dim() == 3 else sequence.shape[0]
    return Pattern("recurrent", inputs=len(args), ops=(op.mode.lower(),), operands=weights,
                   params=(("op", op), ("module", node.target), ("forward", forward), ("imports", imports),
                           ("pytorch", pytorch_ops(written)), ("steps", steps)))


def _live(gm) -> set:
    """The nodes the forward's output depends on."""
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    seen, frontier = set(), [out]
    while frontier:
        node = frontier.pop()
        for arg in node.all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                frontier.append(arg)
    return seen


def _selects(node) -> bool:
    """Whether ``node`` takes an item or a slice of a value (``out[:, -1, :]``, ``state[0]``)."""
    import operator

    return node.op == "call_function" and node.target is operator.getitem
