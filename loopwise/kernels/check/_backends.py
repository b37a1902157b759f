"""Where a candidate defines custom kernels, and which backends those are."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from loopwise.kernels.check._source import SourceIndex, constant_str

BACKENDS = ("cuda", "cpp", "cutlass", "triton", "cute_dsl")

_TRITON_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics"}
_CUTE_DECORATORS = {"cutlass.cute.kernel", "cutlass.cute.jit"}
_CPP_EXTENSION = {"torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"}
_CUTLASS_INCLUDE = re.compile(r"#\s*include\s*[<\"](?:cute|cutlass)/")
_CUDA_TEXT = re.compile(r"__global__|<<<|#\s*include\s*[<\"]cuda")


@dataclass(frozen=True)
class KernelSite:
    """One place that defines or compiles a custom kernel.

    Attributes:
        kind: ``triton``, ``cute_dsl`` or ``extension`` (a ``load_inline``/``load`` call).
        name: the kernel function's name, or the extension's binding.
        node: the decorated function or the compiling call.
    """

    kind: str
    name: str
    node: ast.AST

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)


def _decorator_name(index: SourceIndex, decorator: ast.expr) -> str | None:
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    return index.qualname(decorator)


def kernel_sites(index: SourceIndex) -> list[KernelSite]:
    """Every Triton/CuTe kernel function and every C++/CUDA extension build in the source."""
    sites: list[KernelSite] = []
    for node in ast.walk(index.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = {_decorator_name(index, d) for d in node.decorator_list}
            if names & _TRITON_DECORATORS:
                sites.append(KernelSite("triton", node.name, node))
            elif names & _CUTE_DECORATORS:
                sites.append(KernelSite("cute_dsl", node.name, node))
        elif isinstance(node, ast.Call):
            name = index.call_name(node)
            if name == "triton.jit" and node.args:
                sites.append(KernelSite("triton", ast.unparse(node.args[0]), node))
            elif name in _CPP_EXTENSION:
                sites.append(KernelSite("extension", _extension_name(node), node))
    return sites


def _extension_name(call: ast.Call) -> str:
    for keyword in call.keywords:
        if keyword.arg == "name":
            return constant_str(keyword.value) or ast.unparse(keyword.value)
    return constant_str(call.args[0]) if call.args else "extension"


def _argument(call: ast.Call, name: str, position: int) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return call.args[position] if len(call.args) > position else None


def _is_empty(node: ast.expr | None) -> bool:
    if node is None:
        return True
    if isinstance(node, ast.Constant):
        return not node.value
    return isinstance(node, (ast.List, ast.Tuple)) and not node.elts


def _extension_backend(index: SourceIndex, call: ast.Call) -> str:
    if index.call_name(call) == "torch.utils.cpp_extension.load":
        sources = _argument(call, "sources", 1)
        text = ast.unparse(sources) if sources is not None else ""
        return "cuda" if ".cu" in text else "cpp"
    return "cpp" if _is_empty(_argument(call, "cuda_sources", 2)) else "cuda"


def detect_backends(source: str) -> set[str]:
    """The kernel backends a candidate source uses.

    Args:
        source: the candidate's Python source.

    Returns:
        A subset of ``{"cuda", "cpp", "cutlass", "triton", "cute_dsl"}``; ``cutlass`` means CUDA
        source that includes ``cute/`` or ``cutlass/`` headers. A source that does not parse is
        read with patterns instead.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _detect_by_pattern(source)
    index = SourceIndex(tree)
    found: set[str] = set()
    for site in kernel_sites(index):
        if site.kind == "extension":
            found.add(_extension_backend(index, site.node))  # type: ignore[arg-type]
        else:
            found.add(site.kind)
    texts = [t.text for t in index.c_texts()]
    if any(_CUTLASS_INCLUDE.search(t) for t in texts):
        found.add("cutlass")
    if "cpp" in found and any(_CUDA_TEXT.search(t) for t in texts):
        found.add("cuda")
    return found


def _detect_by_pattern(source: str) -> set[str]:
    found = set()
    if re.search(r"@\s*triton\.(jit|autotune|heuristics)", source):
        found.add("triton")
    if re.search(r"@\s*cute\.(kernel|jit)", source):
        found.add("cute_dsl")
    if re.search(r"\bload_inline\s*\(|cpp_extension\.load\s*\(", source):
        found.add("cuda" if re.search(r"cuda_sources\s*=|__global__", source) else "cpp")
    if _CUTLASS_INCLUDE.search(source):
        found.add("cutlass")
    return found
