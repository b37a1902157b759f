"""Recurrent parts of a partitioned forward: each call of an nn.LSTM, nn.GRU or nn.RNN module (tanh or
relu) on a float32 sequence becomes one Triton part (kind ``recurrent`` of
:class:`~.records.Norm`, its module a :class:`~.records.RecurrentOp`; templates/_recurrent.j2). The
launcher returns what the module returns (the output sequence and h_n, or h_n and c_n for an LSTM),
so the forward reads it as it read the module's.

Any number of layers, one or two directions, ``batch_first`` or not, with or without biases, an
initial state given or zeros, a batched (3-D) or unbatched (2-D) sequence. A module the part does
not compute stays in PyTorch, and :func:`module_refusal` says why: dropout between layers (random in
training), ``proj_size`` (LSTM's projected hidden state), weights other than float32, and weight
matrices too large for 32-bit offsets. A call whose input is no float32 tensor (a packed sequence)
stays too."""

from __future__ import annotations

from loopwise.kernels.expert.partition.nodes import dtype_name, float_shape
from loopwise.kernels.expert.partition.records import Norm, RecurrentOp

_MODULES = ("LSTM", "GRU", "RNN")
_OFFSETS = 2**31  # the weight matrices are indexed with 32-bit offsets


def recurrent_module(gm, node):
    """The nn.LSTM, nn.GRU or nn.RNN module ``node`` calls, or None (a subclass may change its
    forward: only the modules themselves)."""
    if node.op != "call_module":
        return None
    sub = gm.get_submodule(node.target)
    return sub if type(sub).__name__ in _MODULES and type(sub).__module__.startswith("torch.nn") else None


def module_refusal(sub) -> str:
    """Why a recurrent part does not compute the module ``sub``, or "" where it does."""
    name = type(sub).__name__
    if sub.mode not in RecurrentOp.GATES:
        return f"{name} of mode {sub.mode}"
    if getattr(sub, "proj_size", 0):
        return f"{name} with proj_size={sub.proj_size}: the recurrent part has no projection of the hidden state"
    if sub.dropout and sub.num_layers > 1:
        return (f"{name} with dropout={sub.dropout} between its {sub.num_layers} layers: random in training, "
                "the recurrent part computes dropout 0")
    odd = sorted({str(p.dtype).removeprefix("torch.") for p in sub.parameters()} - {"float32"})
    if odd:
        return f"{name} with {', '.join(odd)} weights: the recurrent part computes float32"
    gates, widest = RecurrentOp.GATES[sub.mode], max(sub.hidden_size, sub.input_size,
                                                     sub.hidden_size * (2 if sub.bidirectional else 1))
    if gates * sub.hidden_size * widest >= _OFFSETS:
        return f"{name} with weight matrices of {gates * sub.hidden_size} x {widest}: past 32-bit offsets"
    return ""


def recurrent_op(sub, dtype: str, rank: int, hx) -> tuple[RecurrentOp | None, str]:
    """(the :class:`RecurrentOp` of ``sub`` called on a sequence of ``dtype`` and ``rank`` with the
    state argument ``hx`` (None, a node, or an LSTM's pair), or None with the reason it stays in
    PyTorch)."""
    name = type(sub).__name__
    why = module_refusal(sub)
    if why:
        return None, why
    if dtype != "float32" or rank not in (2, 3):
        return None, f"{name} on a {dtype} input of {rank} dimension(s): the recurrent part reads a float32 sequence"
    if sub.mode == "LSTM" and isinstance(hx, (tuple, list)) and len(hx) != 2:
        return None, f"{name} given a state of {len(hx)} tensors"
    op = RecurrentOp(sub.mode, sub.num_layers, sub.hidden_size, 2 if sub.bidirectional else 1, sub.batch_first,
                     sub.bias, hx is not None)
    return op, ""


def call_arguments(node) -> dict:
    """The call's arguments by name (``input``, ``hx``)."""
    return dict(zip(("input", "hx"), node.args)) | dict(node.kwargs)


def _call(gm, node) -> tuple[RecurrentOp | None, str]:
    """The call's :class:`RecurrentOp`, or None with the reason ("" when ``node`` calls no recurrent module)."""
    sub = recurrent_module(gm, node)
    if sub is None:
        return None, ""
    given = call_arguments(node)
    src = given.get("input")
    if len(node.args) > 2 or set(given) - {"input", "hx"} or not hasattr(src, "meta"):
        return None, f"{type(sub).__name__} {node.target!r} called with other arguments"
    shape = float_shape(src)
    if shape is None:
        return None, f"{type(sub).__name__} {node.target!r} on a packed sequence or a non-float input"
    return recurrent_op(sub, dtype_name(src), len(shape), given.get("hx"))


def recurrent_calls(gm) -> dict:
    """{node: its :class:`RecurrentOp`} for each call of ``gm`` a recurrent part computes."""
    calls = {}
    for node in gm.graph.nodes:
        op, _ = _call(gm, node)
        if op is not None:
            calls[node] = op
    return calls


def recurrent_refusals(gm) -> list[str]:
    """Why each recurrent module call of ``gm`` that no part computes stays in PyTorch."""
    return [why for why in (_call(gm, node)[1] for node in gm.graph.nodes) if why]


def recurrent_parts(calls: dict) -> list:
    """[(Norm of kind ``recurrent``, (the node it computes, [the sequence, the state argument]))]
    for ``calls``: the launcher takes the sequence, the state as the call passes it (None, a node,
    or an LSTM's (h0, c0)), and the module."""
    parts = []
    for node, op in calls.items():
        given = call_arguments(node)
        parts.append((Norm(node.target, "recurrent", inputs=2, operands=(), body=(), expr="x0",
                           ops=(op.mode.lower(),), recurrent=op), (node, [given["input"], given.get("hx")])))
    return parts
