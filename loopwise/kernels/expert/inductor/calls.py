"""What Inductor's ``call(args)`` does, read from the module's source in an :class:`InductorRecord`:
which of its arguments its Triton kernels store into, how many launches it makes, and how many
bytes its arguments hold.

``call`` unpacks its arguments (``arg0_1, arg1_1 = args``) in the order of ``record.inputs``, names
a tensor again (``buf4 = arg0_1``, ``reinterpret_tensor(arg0_1, ...)``) and launches its kernels as
``kernel.run(a, b, ..., stream=...)``; each kernel's decorator in the module lists the parameters
it stores into (``inductor_meta={'mutated_arg_names': [...]}``), and Inductor names every pointer a
kernel stores through ``out_ptrN`` or ``in_out_ptrN`` (a workspace ``ws_ptr``); ``get_args`` builds sample
arguments (``rand_strided(size, stride, device=..., dtype=...)``), and ``call`` asserts each
argument's size (``assert_size_stride(arg0_1, size, stride)``).
"""

from __future__ import annotations

import ast
import math
import re

from loopwise.kernels.expert.inductor.extract import InductorRecord

_MUTATED = re.compile(r"""['"]mutated_arg_names['"]\s*:\s*(\[[^\]]*\])""")
_STORED = re.compile(r"(in_out|out)_ptr\d+|ws_ptr")  # what Inductor names the pointers a kernel stores through
_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
          "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """The module's function ``name``, or the method of that name of a class in it (a Runner's call)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _mutated_params(tree: ast.Module) -> dict[str, list[str]]:
    """Per kernel the module compiles (``name = async_compile.triton('name', source, ...)``), the
    parameters its decorator says it stores into."""
    out = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "triton"
                and len(node.args) >= 2 and all(isinstance(a, ast.Constant) for a in node.args[:2])):
            continue
        found = _MUTATED.search(str(node.args[1].value))
        out[str(node.args[0].value)] = ast.literal_eval(found.group(1)) if found else []
    return out


def _unpacked(call: ast.FunctionDef) -> list[str]:
    """The names ``call`` unpacks its arguments into, in order."""
    for stmt in call.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id == "args" \
                and isinstance(stmt.targets[0], ast.Tuple):
            return [e.id for e in stmt.targets[0].elts if isinstance(e, ast.Name)]
    return []


def _root(expr: ast.expr, aliases: dict[str, str]) -> str | None:
    """The name of the tensor ``expr`` is, through ``reinterpret_tensor`` and names given again."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "reinterpret_tensor" \
            and expr.args:
        expr = expr.args[0]
    if not isinstance(expr, ast.Name):
        return None
    name = expr.id
    while name in aliases:
        name = aliases[name]
    return name


def written_inputs(record: InductorRecord) -> list[str]:
    """The entries of ``record.inputs`` (``arg:x``, ``self.get_buffer(...)``) that a Triton kernel of
    ``call`` stores into, in their order."""
    tree = ast.parse(record.module)
    call = _function(tree, "call")
    if call is None:
        return []
    unpacked, mutated = _unpacked(call), _mutated_params(tree)
    kernels = {k.name: k for k in record.kernels}
    aliases: dict[str, str] = {}
    written: set[str] = set()
    for node in ast.walk(call):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            source = _root(node.value, {})
            if source is not None:
                aliases[node.targets[0].id] = source
    for node in ast.walk(call):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
                and isinstance(node.func.value, ast.Name) and node.func.value.id in kernels):
            continue
        kernel = kernels[node.func.value.id]
        names = [n for n in kernel.arg_names if n not in kernel.config]
        if len(node.args) != len(names):
            names = [n for n in names if n not in kernel.constants]
        for param, arg in zip(names, node.args):
            if param in mutated.get(kernel.name, ()) or _STORED.fullmatch(param):
                root = _root(arg, aliases)
                if root is not None:
                    written.add(root)
    return [path for name, path in zip(unpacked, record.inputs) if name in written]


def launches(record: InductorRecord) -> int:
    """The launches ``call`` makes: its Triton kernels' runs and its library calls (``extern_kernels.*``,
    ``aten.*``, ``torch.ops.aten.*``)."""
    call = _function(ast.parse(record.module), "call")
    if call is None:
        return len(record.kernels)
    kernels, count = {k.name for k in record.kernels}, 0
    for node in ast.walk(call):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        chain, base = [], node.func
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        chain.append(base.id if isinstance(base, ast.Name) else "")
        if (chain[0] == "run" and chain[1] in kernels) or chain[-1] == "extern_kernels" or "aten" in chain:
            count += 1
    return count


def input_bytes(record: InductorRecord, which=lambda path: path.startswith("arg:")) -> int:
    """The bytes of ``call``'s arguments whose ``record.inputs`` entry ``which`` accepts (by default
    the forward's own arguments): their sizes as ``call`` asserts them, their element sizes from
    ``get_args``'s sample tensors (4 bytes where it names none)."""
    tree = ast.parse(record.module)
    get_args, call = _function(tree, "get_args"), _function(tree, "call")
    if call is None:
        return 0
    widths = {}
    for stmt in get_args.body if get_args is not None else ():
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.Call):
            dtype = next((k.value for k in stmt.value.keywords if k.arg == "dtype"), None)
            widths[stmt.targets[0].id] = _BYTES.get(dtype.attr if isinstance(dtype, ast.Attribute) else "", 4)
    sizes = {}
    for node in ast.walk(call):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "assert_size_stride" \
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and isinstance(node.args[1], ast.Tuple):
            shape = [e.value for e in node.args[1].elts if isinstance(e, ast.Constant) and isinstance(e.value, int)]
            sizes.setdefault(node.args[0].id, math.prod(shape))
    return sum(sizes.get(name, 0) * widths.get(name, 4) for name, path in zip(_unpacked(call), record.inputs)
               if which(path))
