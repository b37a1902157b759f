"""The rewritten forward: the graph with fused parts replaced by launches, written out as standalone Python."""

from __future__ import annotations

import re

from loopwise.kernels.expert import elementwise as ew
from loopwise.kernels.expert.fx_graph import traced_constant
from loopwise.kernels.expert.partition.records import LAUNCHERS
from loopwise.kernels.expert.partition.writes import eliminate_dead_code, in_place_writes


_ALLOWED_GLOBALS = {"torch", "operator", "inf", "nan", "getattr"}  # getattr: a submodule named by a number


def _torch_name(value) -> str:
    """``torch.<name>`` where ``value`` is a class torch exports under its own name, or that name
    written out (``torch.Tensor``, which fx binds to ``_torch_Tensor_`` when a forward annotates its
    arguments), else ""."""
    import torch

    if isinstance(value, str):
        head, _, name = value.partition(".")
        return value if head == "torch" and name.isidentifier() and isinstance(getattr(torch, name, None), type) else ""
    name = getattr(value, "__name__", "")
    return f"torch.{name}" if isinstance(value, type) and name and getattr(torch, name, None) is value else ""


def _stand_in(name: str):
    """A function with its own identity for a launcher call in the graph: fx names the call after
    it, and the generated file defines the real one under that name."""
    def launcher(*_a):
        raise AssertionError("never called")
    launcher.__name__ = launcher.__qualname__ = name
    return launcher


def rewrite_forward(gm, outputs, gemms=(), norms=()) -> tuple[str, bool, tuple[str, ...]]:
    """The forward's source with every group output computed by its launcher ``fused_<i>``,
    every GEMM's (a Linear's, or its epilogue's; a product of two activations) by ``linear_<k>`` / ``conv_<k>`` and every
    norm's (a GroupNorm's or BatchNorm's, with its prologue and epilogue) by ``gnorm_<k>``, whether
    the forward still reads the model (so ModelNew needs the reference's __init__), and the import
    lines the forward needs beyond torch."""
    import torch.fx as fx

    graph = gm.graph
    writes = in_place_writes(gm)  # before the launchers read what they replace
    for node in list(graph.nodes):  # a value the forward keeps (an F.linear left to PyTorch: ``linear_1``)
        if re.match(_LAUNCHER_NAMES, node.name):  # must not be named as a launcher, which it would shadow
            node._rename(f"{node.name}_pt")
    launchers, now = [], {}  # now: a replaced node -> the launcher call that computes it instead

    def swap(out, name: str, nodes, paths=()) -> None:
        """``out`` computed by the launcher ``name`` from ``nodes`` (as replaced so far; an entry may
        also be None or a tuple of nodes, as a recurrent module's state) and the model's ``paths``."""
        launcher = _stand_in(name)
        launchers.append(launcher)
        with graph.inserting_before(out):
            tensors = [graph.get_attr(path) for path in paths]
            # named apart from the launcher: the forward's local must not shadow the function
            args = fx.node.map_arg(tuple(nodes), lambda n: now.get(n, n))
            new = graph.create_node("call_function", launcher, (*args, *tensors), {}, name=f"{name}_out")
        out.replace_all_uses_with(new)
        now[out] = new

    for i, (out, xs, ps, _) in enumerate(outputs):
        swap(out, f"fused_{i}", (*xs, *ps))
    for k, (gemm, (out, source)) in enumerate(gemms):
        if not gemm.weight:  # a product of two activations: ``source`` is its input nodes
            swap(out, f"linear_{k}", source)
            continue
        swap(out, f"{'conv' if gemm.conv else 'linear'}_{k}", (source,),
             (gemm.weight, *([gemm.bias] if gemm.bias else []), *gemm.operands))
    for k, (norm, (out, xs)) in enumerate(norms):
        # the module itself (its weights, running statistics and mode), or a functional batch_norm's
        # or a depthwise convolution's tensors; a softmax reads none
        own = norm.call.paths if norm.call else norm.pool.paths if norm.pool else (norm.module,) if norm.module else ()
        swap(out, f"{LAUNCHERS.get(norm.kind, 'gnorm')}_{k}", xs, (*own, *norm.operands, *norm.post_operands))
    eliminate_dead_code(gm, writes)
    _inline_traced_constants(gm)
    code = graph.python_code(root_module="self")
    src, imports = code.src, []
    for name, value in code.globals.items():
        if name == "__builtins__" or not re.search(_named(name), src):
            continue
        if value in launchers:
            src = re.sub(_named(name), value.__name__, src)
        elif name not in _ALLOWED_GLOBALS and _torch_name(value):  # torch.Tensor in an annotation (L3/16)
            src = re.sub(_named(name), _torch_name(value), src)
        elif name not in _ALLOWED_GLOBALS:
            raise ew.Unsupported(f"the forward calls {name}, which a standalone file cannot name")
        elif name not in ("torch", "getattr"):  # getattr is a builtin
            imports.append("import operator" if name == "operator" else f"from math import {name}")
    lines = [line.rstrip() for line in src.strip("\n").splitlines() if line.strip()]
    used = any(n.op in ("get_attr", "call_module") for n in graph.nodes)
    return "\n".join("    " + line for line in lines) + "\n", used, tuple(sorted(imports))


def _named(name: str) -> str:
    """A pattern for ``name`` used as a name in the forward's source: not an attribute (``x.device``),
    a keyword argument (``device=...``) or inside a string."""
    return rf"(?<![.\w'\"]){re.escape(name)}\b(?!\s*=[^=])(?!['\"])"


_LAUNCHER_NAMES = rf"({'|'.join(sorted({'fused', 'linear', 'conv', 'gnorm', *LAUNCHERS.values()}))})_\d+$"


def pytorch_ops(gm) -> tuple[str, ...]:
    """What the rewritten forward still runs in PyTorch, by name, in order."""
    names = []
    for node in gm.graph.nodes:
        if node.op == "call_module":
            names.append(type(gm.get_submodule(node.target)).__name__)
        elif node.op == "call_method":
            names.append(str(node.target))
        elif node.op == "call_function" and not re.match(_LAUNCHER_NAMES, getattr(node.target, "__name__", "")):
            names.append(getattr(node.target, "__name__", str(node.target)))
    return tuple(names)


_CONSTANT_ELEMENTS = 64  # the largest tensor made in forward that is written into the file as a literal


def _inline_traced_constants(gm) -> None:
    """Tensors the forward makes from Python values (``torch.tensor(self.value)``) become the
    trace's own constants (``_tensor_constant0``), which ModelNew does not have: each is made again
    in the forward as the reference made it (``torch.tensor(values, dtype=...)``, on the CPU)."""
    import functools

    import torch

    for node in list(gm.graph.nodes):
        if not traced_constant(node):
            continue
        value = functools.reduce(getattr, node.target.split("."), gm)
        if not isinstance(value, torch.Tensor) or value.numel() > _CONSTANT_ELEMENTS or value.is_meta:
            raise ew.Unsupported(f"the forward makes a tensor ({node.target}) a standalone file cannot write down")
        with gm.graph.inserting_before(node):
            made = gm.graph.call_function(torch.tensor, (value.tolist(),), {"dtype": value.dtype})
        node.replace_all_uses_with(made)
        gm.graph.erase_node(node)

