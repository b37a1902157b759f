"""The judge's records sit below it: no import cycle among evaluate, check, backends and roofline."""

from __future__ import annotations

import ast
from pathlib import Path

KERNELS = Path(__file__).parents[3] / "loopwise" / "kernels"
PARTS = ("evaluate", "check", "roofline", "backends.py")


def _module(path: Path) -> str:
    parts = path.relative_to(KERNELS.parents[1]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ``known`` that ``path`` imports anywhere (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & known
            found |= subs or ({node.module} & known)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names} & known
    return found


def _graph() -> dict[str, set[str]]:
    files = [p for part in PARTS
             for p in ([KERNELS / part] if part.endswith(".py") else (KERNELS / part).rglob("*.py"))]
    known = {_module(p) for p in files}
    return {_module(p): _imports(p, known) - {_module(p)} for p in files}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def test_no_import_cycle_among_the_judge_and_its_neighbours():
    graph = _graph()
    cycles = sorted(f"{a} <-> {b}" for a in graph for b in graph[a] if _reaches(graph, b, a))
    assert not cycles, cycles


def test_the_result_records_import_nothing_of_the_judge():
    graph = _graph()
    assert not _reaches(graph, "loopwise.kernels.evaluate.result", "loopwise.kernels.evaluate.judge")
    assert not any(m.startswith(("loopwise.kernels.check", "loopwise.kernels.roofline", "loopwise.kernels.backends"))
                   for m in graph["loopwise.kernels.evaluate.result"])
