"""A parsed candidate: import aliases, module-level bindings, code reachable from ModelNew, C strings.

Every rule reads the candidate through one ``SourceIndex`` so that names resolve the same way
everywhere: ``tl.dot`` is ``triton.language.dot`` whether triton was imported as ``tl`` or through
``from triton import language``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

# Public spellings of objects that also live under a private or longer path.
_CANONICAL_PREFIXES: tuple[tuple[str, str], ...] = (
    ("torch.cuda.streams.", "torch.cuda."),
    ("torch._C._TensorBase", "torch.Tensor"),
    ("torch._C.TensorBase", "torch.Tensor"),
    ("torch._tensor.Tensor", "torch.Tensor"),
    ("triton.runtime.jit.jit", "triton.jit"),
    ("triton.runtime.autotuner.", "triton."),
    ("triton.runtime.jit.", "triton."),
    ("cutlass.cute.core.", "cutlass.cute."),
    ("torch.nn.modules.module.Module", "torch.nn.Module"),
    ("mock.", "unittest.mock."),
)

# Markers of C, C++, CUDA or PTX text inside a Python string.
_C_MARKERS = re.compile(
    r"#\s*include|__global__|__device__|torch::|at::|<<<|\basm\s*(?:volatile\s*)?\(|extern\s+\"C\"|"
    r"TORCH_CHECK|cudaStream|cublas|PYBIND11|\bmma\.|\bwgmma\.|\bcvt\.|cutlass::|cute::|\.reg\s+\.|"
    r"\bstd::|\bpthread_\w+\s*\(|\b(?:secure_)?getenv\s*\("
)
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def canonical(name: str) -> str:
    """The public spelling of a dotted name (``torch.cuda.streams.Event`` -> ``torch.cuda.Event``)."""
    for prefix, replacement in _CANONICAL_PREFIXES:
        if name.startswith(prefix):
            return replacement + name[len(prefix) :]
    return name


@dataclass(frozen=True)
class CText:
    """A C/C++/CUDA/PTX text found in a Python string, with its comments blanked out."""

    text: str
    line: int  # line of the Python string literal that holds it

    def line_of(self, offset: int) -> int:
        return self.line + self.text.count("\n", 0, offset)


class SourceIndex:
    """Name resolution and reachability over one parsed candidate."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {
            child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
        }
        self.aliases: dict[str, str] = {}
        self._collect_import_aliases()
        self.module_defs: dict[str, list[ast.AST]] = {}
        self._collect_module_defs(tree.body)
        self._collect_assignment_aliases()
        # Module-level classes, also those inside module-level if/try blocks (first definition wins).
        self.classes: dict[str, ast.ClassDef] = {}
        for name, nodes in self.module_defs.items():
            found = [n for n in nodes if isinstance(n, ast.ClassDef)]
            if found:
                self.classes[name] = found[0]
        self.modelnew: ast.ClassDef | None = self.classes.get("ModelNew") or self._aliased_class("ModelNew")
        self.reached_roots: list[ast.AST] = self._reach()
        self.reached: set[int] = {id(n) for root in self.reached_roots for n in ast.walk(root)}

    # -- names -------------------------------------------------------------------------------

    def qualname(self, node: ast.AST) -> str | None:
        """The dotted name an expression resolves to, or None when it is not a name chain."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.aliases.get(node.id, node.id)
        return canonical(".".join([base, *reversed(parts)]))

    def call_name(self, call: ast.Call) -> str | None:
        return self.qualname(call.func)

    def calls(self) -> Iterator[tuple[ast.Call, str | None]]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                yield node, self.call_name(node)

    def names(self) -> Iterator[tuple[ast.AST, str]]:
        """Every outermost name chain (``a.b.c`` once, not also ``a.b`` and ``a``) with its qualname."""
        for node in ast.walk(self.tree):
            if not isinstance(node, (ast.Name, ast.Attribute)):
                continue
            parent = self.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue
            name = self.qualname(node)
            if name is not None:
                yield node, name

    def _collect_import_aliases(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        self.aliases.setdefault(root, root)
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"

    def _collect_assignment_aliases(self) -> None:
        # ``Event = torch.cuda.Event`` makes ``Event.elapsed_time = f`` a patch of the real class.
        for _ in range(2):
            for node in ast.walk(self.tree):
                if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                    continue
                target = node.targets[0]
                if not isinstance(target, ast.Name) or target.id in self.aliases:
                    continue
                name = self.qualname(node.value)
                roots = {v.split(".")[0] for v in self.aliases.values()} | {"builtins"}
                if name and name.split(".")[0] in roots:
                    self.aliases[target.id] = name

    # -- module bindings and reachability ----------------------------------------------------

    def _collect_module_defs(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.module_defs.setdefault(stmt.name, []).append(stmt)
                continue
            for name in _bound_names(stmt):
                self.module_defs.setdefault(name, []).append(stmt)
            # Bindings inside module-level if/try/with/for blocks are module bindings too.
            for field in ("body", "orelse", "finalbody"):
                self._collect_module_defs(getattr(stmt, field, None) or [])
            for handler in getattr(stmt, "handlers", None) or []:
                self._collect_module_defs(handler.body)

    def _aliased_class(self, name: str) -> ast.ClassDef | None:
        """The class behind ``ModelNew = FastRelu`` at module level."""
        for stmt in self.module_defs.get(name, ()):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
                return self.classes.get(stmt.value.id)
        return None

    def _reach(self) -> list[ast.AST]:
        """Module-level definitions ModelNew can get to by name, ModelNew first."""
        if self.modelnew is None:
            return []
        roots: list[ast.AST] = []
        seen: set[int] = set()
        queue: list[ast.AST] = [self.modelnew]
        while queue:
            node = queue.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            roots.append(node)
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name):
                    queue.extend(self.module_defs.get(sub.id, ()))
        return roots

    def is_reached(self, node: ast.AST) -> bool:
        return id(node) in self.reached

    def enclosing(self, node: ast.AST, kinds: tuple[type, ...]) -> ast.AST | None:
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, kinds):
            parent = self.parents.get(parent)
        return parent

    def method(self, cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
        if cls is None:
            return None
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return stmt  # type: ignore[return-value]
        return None

    # -- strings -----------------------------------------------------------------------------

    def is_bare_string(self, node: ast.AST) -> bool:
        """True for docstrings and other string statements, which never count as code."""
        return isinstance(self.parents.get(node), ast.Expr)

    def strings(self) -> Iterator[ast.Constant]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if not self.is_bare_string(node):
                    yield node

    def c_texts(self) -> list[CText]:
        """C, C++, CUDA and PTX texts embedded in Python strings, comments blanked out."""
        texts = []
        for node in self.strings():
            if _C_MARKERS.search(node.value):
                texts.append(CText(_blank_c_comments(node.value), node.lineno))
        return texts


def _bound_names(stmt: ast.stmt) -> list[str]:
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [a.asname or a.name.split(".")[0] for a in stmt.names if a.name != "*"]
    elif isinstance(stmt, (ast.With, ast.For)):
        targets = [i.optional_vars for i in getattr(stmt, "items", []) if i.optional_vars]
        if isinstance(stmt, ast.For):
            targets = [stmt.target]
    names = []
    for target in targets:
        names.extend(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _blank_c_comments(text: str) -> str:
    # Keep the newlines so that offsets still map to the right line.
    return _C_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def constant_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def line_of(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)
