"""Rules against reaching the reference: gc, frames, module tables, files, imports, calling Model."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator

from loopwise.kernels.check._codes import RuleMatch
from loopwise.kernels.check._source import SourceIndex, line_of

_REFERENCE_NAMES = re.compile(
    r"^(gc\.(get_objects|get_referrers|get_referents|garbage)|"
    r"sys\.(_getframe|_current_frames|settrace|setprofile|modules)|"
    r"inspect\.(currentframe|stack|trace|getouterframes|getinnerframes|getframeinfo|getsource\w*)|"
    r"importlib|runpy|linecache|__main__|"
    r"os\.(open|listdir|scandir|walk|fdopen)|glob|pathlib\.Path\.read_\w+|io\.open|"
    r"torch\.load|numpy\.(load|fromfile|loadtxt)|pickle\.load|shelve|"
    r"__import__|__builtins__|exec|eval|compile|open|builtins\.(open|exec|eval|__import__))(\.|$)"
)
_FRAME_ATTRS = {"f_back", "f_globals", "f_locals", "tb_frame", "gi_frame", "cr_frame", "__globals__",
                "func_globals", "__subclasses__", "__builtins__"}
_FILE_METHODS = {"read_text", "read_bytes"}
# Packages a candidate may import besides the standard library: kernel toolchains and array libraries.
_ALLOWED_PACKAGES = {"torch", "triton", "cutlass", "cuda", "cupy", "numpy", "tilelang", "einops",
                     "nvidia", "numba", "pycuda", "typing_extensions"}
_BANNED_STDLIB = {"__main__", "importlib", "runpy"}


def importable(module: str) -> bool:
    """Whether a candidate may import ``module``: the standard library (but the banned few) and
    the kernel toolchains and array libraries."""
    root = module.split(".")[0]
    if root in _BANNED_STDLIB:
        return False
    return root in _ALLOWED_PACKAGES or root in sys.stdlib_module_names


def _is_main_guard(index: SourceIndex, node: ast.Constant) -> bool:
    parent = index.parents.get(node)
    if not isinstance(parent, ast.Compare):
        return False
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in [parent.left, *parent.comparators])


def find_reference_access(index: SourceIndex) -> Iterator[RuleMatch]:
    """gc walks, frames, sys.modules, __main__, file reads, dynamic code and foreign imports."""
    for node, name in index.names():
        if _REFERENCE_NAMES.match(name) and not isinstance(index.parents.get(node), (ast.Import, ast.alias)):
            yield RuleMatch("reference_access", line_of(node), f"Use of `{name}`")
    for node in ast.walk(index.tree):
        if isinstance(node, ast.Attribute) and node.attr in _FRAME_ATTRS:
            yield RuleMatch("reference_access", node.lineno, f"Access to `.{node.attr}`",
                          "frames, globals and class registries lead to the reference")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _FILE_METHODS:
                yield RuleMatch("reference_access", node.lineno, f"File read `.{node.func.attr}()`",
                              "a candidate must not read files at run time")
        elif isinstance(node, ast.Constant) and node.value == "__main__":
            if not index.is_bare_string(node) and not _is_main_guard(index, node):
                yield RuleMatch("reference_access", node.lineno, "The string `'__main__'`",
                              "the judge's main module holds the reference")
    yield from _foreign_imports(index)


def _foreign_imports(index: SourceIndex) -> Iterator[RuleMatch]:
    for node in ast.walk(index.tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield RuleMatch("reference_access", node.lineno, "A relative import",
                              "the candidate must not import modules next to it, such as the problem")
                continue
            modules = [node.module or ""]
        for module in modules:
            if not importable(module):
                yield RuleMatch("reference_access", node.lineno, f"Import of `{module}`",
                              "it is neither the standard library nor a kernel toolchain and may be "
                              "the problem module or the judge")


def find_reference_call(index: SourceIndex) -> Iterator[RuleMatch]:
    """``Model`` (defined here or imported) used by ModelNew, including as a base class."""
    if index.modelnew is None:
        return
    for root in index.reached_roots:
        # Model's own body (``super(Model, self)``) is not a use; the reference to it is.
        if not (isinstance(root, ast.ClassDef) and root.name == "Model"):
            yield from _model_uses(root)


def _model_uses(root: ast.AST) -> Iterator[RuleMatch]:
    for node in ast.walk(root):
        if isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Load):
            yield RuleMatch("reference_call", node.lineno, "ModelNew uses the reference class `Model`",
                          "a candidate must not run the reference")
        elif isinstance(node, ast.Attribute) and node.attr == "Model":
            yield RuleMatch("reference_call", node.lineno, f"ModelNew uses `{ast.unparse(node)}`",
                          "a candidate must not run the reference")
