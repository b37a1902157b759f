"""Rules on what ModelNew actually runs: kernels reached, silent fallbacks, caches, side streams."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from loopwise.kernels.check._backends import KernelSite, kernel_sites
from loopwise.kernels.check._codes import RuleMatch
from loopwise.kernels.check._source import SourceIndex, line_of

_NON_KERNEL_OPS = {"aten", "prims", "quantized", "_c10d_functional"}


def find_no_custom_kernel(index: SourceIndex) -> Iterator[RuleMatch]:
    """No kernel at all, or kernels that ModelNew can never get to by name."""
    if index.modelnew is None:
        return
    sites = kernel_sites(index)
    if not sites:
        yield RuleMatch("no_custom_kernel", index.modelnew.lineno, "ModelNew is defined",
                      "the source has no @triton.jit, load_inline or CuTe kernel, so it is plain PyTorch")
        return
    if any(index.is_reached(site.node) for site in sites) or _uses_registered_ops(index, sites):
        return
    first = sites[0]
    others = f" (and {len(sites) - 1} more)" if len(sites) > 1 else ""
    yield RuleMatch("no_custom_kernel", first.line, f"Kernel `{first.name}`{others} is defined",
                  "ModelNew never reaches it, so forward runs plain PyTorch and the kernel is a decoy",
                  evidence={"kernels": ",".join(s.name for s in sites)})


def _uses_registered_ops(index: SourceIndex, sites: list[KernelSite]) -> bool:
    # load_inline(..., is_python_module=False) registers ``torch.ops.<ns>.<fn>``.
    if not any(site.kind == "extension" for site in sites):
        return False
    for root in index.reached_roots:
        for node in ast.walk(root):
            name = index.qualname(node) if isinstance(node, ast.Attribute) else None
            if name and name.startswith("torch.ops.") and name.split(".")[2] not in _NON_KERNEL_OPS:
                return True
    return False


# -- fallback ---------------------------------------------------------------------------------


def _handler_reraises(handler: ast.ExceptHandler) -> bool:
    stack: list[ast.AST] = list(handler.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Raise):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _swallowing_handler(node: ast.AST) -> ast.ExceptHandler | None:
    if isinstance(node, (ast.Try, ast.TryStar)):
        for handler in node.handlers:
            if not _handler_reraises(handler):
                return handler
    return None


def _builds_kernel(index: SourceIndex, node: ast.AST, kernel_names: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = index.call_name(sub) or ""
            if name.startswith("torch.utils.cpp_extension.") or name.startswith("triton."):
                return True
        if isinstance(sub, ast.Name) and sub.id in kernel_names:
            return True
    return False


def find_fallbacks(index: SourceIndex) -> Iterator[RuleMatch]:
    """try/except that does not re-raise, in code ModelNew reaches or around a kernel build."""
    kernel_names = {site.name for site in kernel_sites(index)}
    for node in ast.walk(index.tree):
        handler = _swallowing_handler(node)
        if handler is None:
            continue
        if index.is_reached(node):
            where = "in code ModelNew runs"
        elif index.enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) is None and \
                _builds_kernel(index, node, kernel_names):
            where = "around a kernel build"
        else:
            continue
        yield RuleMatch("fallback", handler.lineno, f"Exception handler {where}",
                      "it does not re-raise, and a silent fallback hides a broken kernel")
    for node in ast.walk(index.tree):
        if isinstance(node, ast.Call) and index.is_reached(node):
            if (index.call_name(node) or "").endswith("contextlib.suppress") or \
                    index.call_name(node) == "suppress":
                yield RuleMatch("fallback", node.lineno, "`contextlib.suppress` in code ModelNew runs",
                              "a silent fallback hides a broken kernel")


# -- pointer_cache ----------------------------------------------------------------------------


def _is_pointer(index: SourceIndex, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return isinstance(node, ast.Attribute) and node.attr == "_cdata"
    if isinstance(node.func, ast.Attribute) and node.func.attr == "data_ptr":
        return True
    return index.call_name(node) in ("id", "builtins.id")


def _pointer_exprs(index: SourceIndex, root: ast.AST) -> list[ast.AST]:
    found = []
    for node in ast.walk(root):
        if _is_pointer(index, node):
            parent = index.parents.get(node)
            # ``x.data_ptr() % 16`` is an alignment test, not a key.
            if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Mod, ast.BitAnd)):
                continue
            found.append(node)
    return found


def _tainted_names(index: SourceIndex, root: ast.AST, pointers: list[ast.AST]) -> set[str]:
    """Names that hold a pointer or a key built from one (``key = (x.data_ptr(), x.shape)``)."""
    marked = {id(p) for p in pointers}
    names: set[str] = set()
    for _ in range(3):
        for node in ast.walk(root):
            if isinstance(node, ast.Assign) and _mentions(index, node.value, marked, names):
                for target in node.targets:
                    elements = target.elts if isinstance(target, ast.Tuple) else [target]
                    names.update(e.id for e in elements if isinstance(e, ast.Name))
    return names


def _mentions(index: SourceIndex, node: ast.AST, marked: set[int], names: set[str]) -> bool:
    # ``cache.get(key)`` or ``cache[key]`` is a lookup: its result is a value, not a key.
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in marked or (isinstance(current, ast.Name) and current.id in names):
            return True
        if isinstance(current, ast.Subscript) or _is_lookup_call(current):
            continue
        stack.extend(ast.iter_child_nodes(current))
    return False


def _is_lookup_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr in ("get", "setdefault", "pop", "__contains__", "__getitem__")


def _used_as_key(index: SourceIndex, node: ast.AST) -> bool:
    """Whether a pointer expression ends up as a dict key, a comparison or a stored attribute."""
    child, parent = node, index.parents.get(node)
    while parent is not None and not isinstance(parent, ast.stmt):
        if isinstance(parent, ast.Subscript) and child is parent.slice:
            return True
        if isinstance(parent, ast.Compare):
            # ``key is not None`` tests a value; ``ptr == self._last_ptr`` or ``key in cache`` is a lookup.
            return not any(isinstance(side, ast.Constant) for side in [parent.left, *parent.comparators])
        if isinstance(parent, ast.Dict) or _is_lookup_call(parent):
            return True
        child, parent = parent, index.parents.get(parent)
    if isinstance(parent, ast.Assign):
        return any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in parent.targets)
    return False


def find_pointer_caches(index: SourceIndex) -> Iterator[RuleMatch]:
    """Caches keyed on data_ptr()/id() of tensors, identity checks against stored tensors, lru_cache."""
    for root in index.reached_roots:
        pointers = _pointer_exprs(index, root)
        marked = {id(p) for p in pointers}
        names = _tainted_names(index, root, pointers)
        for node in ast.walk(root):
            is_key = id(node) in marked or (isinstance(node, ast.Name) and node.id in names
                                          and isinstance(node.ctx, ast.Load))
            if is_key and _used_as_key(index, node):
                yield RuleMatch("pointer_cache", line_of(node), f"`{ast.unparse(node)}` used as a cache key",
                              "a result cached on a tensor's address goes stale when new inputs reuse it")
            if isinstance(node, ast.Compare) and _identity_check(node):
                yield RuleMatch("pointer_cache", node.lineno, f"Identity test `{ast.unparse(node)}`",
                              "comparing inputs with stored tensors by identity caches results across calls")
        for node in ast.walk(root):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    name = index.qualname(decorator.func if isinstance(decorator, ast.Call) else decorator)
                    if name in ("functools.lru_cache", "functools.cache"):
                        yield RuleMatch("pointer_cache", decorator.lineno, f"`@{name}` on `{node.name}`",
                                      "a memoized function returns stale results for tensors of equal identity")


def _identity_check(node: ast.Compare) -> bool:
    if not any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
        return False
    sides = [node.left, *node.comparators]
    if any(isinstance(s, ast.Constant) for s in sides):
        return False
    return any(isinstance(s, ast.Attribute) and isinstance(s.value, ast.Name) and s.value.id == "self"
               for s in sides)


# -- stream_injection -------------------------------------------------------------------------

_STREAM_NAMES = {"torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.cuda.set_stream",
                 "torch.Stream", "torch.cuda.StreamContext", "torch.cuda.get_stream_from_external"}
_C_STREAM = re.compile(r"\bcudaStreamCreate\w*|\bgetStreamFromPool\b|\bcuStreamCreate\w*|\bsetCurrentCUDAStream\b")
_LAUNCH = re.compile(r"<<<([^<>]*)>>>")
_DEFAULT_STREAMS = re.compile(r"^\s*(0|nullptr|NULL|cudaStreamDefault|cudaStreamLegacy|cudaStreamPerThread)\s*$|"
                              r"getCurrentCUDAStream|getDefaultCUDAStream")


def find_streams(index: SourceIndex) -> Iterator[RuleMatch]:
    """Side CUDA streams in Python and in embedded CUDA source (a flag: the timing decides)."""
    for node, name in index.names():
        if name in _STREAM_NAMES:
            yield RuleMatch("stream_injection", line_of(node), f"Use of `{name}`")
    for text in index.c_texts():
        for match in _C_STREAM.finditer(text.text):
            yield RuleMatch("stream_injection", text.line_of(match.start()), f"CUDA `{match.group(0)}`")
        uses_current = "getCurrentCUDAStream" in text.text or "getDefaultCUDAStream" in text.text
        for match in _LAUNCH.finditer(text.text):
            args = match.group(1).split(",")
            if len(args) >= 4 and not _DEFAULT_STREAMS.search(args[3]) and not uses_current:
                yield RuleMatch("stream_injection", text.line_of(match.start()),
                              f"Kernel launch on stream `{args[3].strip()}`")
