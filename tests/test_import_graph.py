"""The package's import structure: core names no engine, engines do not import each other, no cycles.

Every module of ``loopwise/`` is parsed with ``ast``; imports at module level and inside functions
count, those under ``if TYPE_CHECKING:`` do not (they never run). Relative imports are resolved
against the importing module's package.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "loopwise"
ENGINES = ("kernels", "training", "memory")
# Modules outside core that compose the engines; core must not import them either.
COMPOSERS = ("loopwise.config", "loopwise.cli")
# The cycle another part of the restructuring removes (the expert's capture, generate, partition
# and matmul_variants); once it is gone, this is empty and test_no_import_cycle passes.
def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: ``if TYPE_CHECKING:`` bodies are skipped."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str) -> str | None:
    """The longest module of the package that ``name`` is or lies in."""
    modules = _modules()
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


@cache
def _imports(module: str) -> frozenset[str]:
    """The package modules ``module`` imports (``from pkg import sub`` counts ``pkg.sub`` only)."""
    path = _modules()[module]
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = _resolve(module, is_package, node)
            # ``from pkg import sub`` imports the submodule; any other name comes from ``pkg`` itself
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in _modules() else base
                     for alias in node.names]
        for name in names:
            if name.startswith("loopwise") and (target := _known(name)) and target != module:
                targets.add(target)
    return frozenset(targets)


def _engine_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ENGINES else None


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_core_imports_no_engine_and_no_composer() -> None:
    bad = sorted(f"{module} -> {target}" for module in _modules() if _in(module, "loopwise.core")
                 for target in _imports(module)
                 if _engine_of(target) or any(_in(target, c) for c in COMPOSERS))
    assert not bad, "core imports engines or their composers:\n" + "\n".join(bad)


def test_no_engine_imports_another() -> None:
    bad = sorted(f"{module} -> {target}" for module in _modules() if (engine := _engine_of(module))
                 for target in _imports(module) if _engine_of(target) not in (None, engine))
    assert not bad, "engines import each other:\n" + "\n".join(bad)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_core_names_no_engine_in_string_literals() -> None:
    bad = []
    for module, path in _modules().items():
        if not _in(module, "loopwise.core"):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        docstrings = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and node.value in ENGINES):
                bad.append(f"{module}:{node.lineno}: {node.value!r}")
    assert not bad, "core names engines in strings:\n" + "\n".join(bad)


def _cycles() -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    graph = {module: sorted(_imports(module)) for module in _modules()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(frozenset(component))
    return components


def _describe(cycles: list[frozenset[str]]) -> str:
    return "\n".join(" <-> ".join(sorted(cycle)) for cycle in cycles)


def test_no_import_cycle() -> None:
    cycles = _cycles()
    assert not cycles, "import cycles:\n" + _describe(cycles)
