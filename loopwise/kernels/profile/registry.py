"""Registry of the micro-profiling tools: discovery through entry points, and which ones to run.

Tools are plugins: any installed distribution can add one under the entry-point group
``loopwise.kernels.tools`` (name = tool name, value = ``module:TOOL``, the tool object or its class).
This package declares its own in ``pyproject.toml``. A source checkout that was never installed
exposes no entry points, so then the modules of :mod:`loopwise.kernels.profile.tools` are loaded
directly: the same tools either way, so tests and callers do not depend on how the package got here.

Modes of :func:`select`:

``proactive``
    Only the tools whose ``applies_to`` holds the kernel's roofline class: a memory-bound kernel
    is not told about tensor cores. Without a classification nothing can be gated, so every tool runs.
``all``
    Every tool, whatever the class (ranking by score then decides what comes first).
``raw``
    No tool: the caller wants the measurements alone.

``also`` names tools to run besides those the mode selects, whatever the class (the tools an
analyst asked for), except in ``raw`` mode.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Any, Literal

from loopwise.kernels.profile.classify import Classification, KernelClass
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool

__all__ = ["GROUP", "MODES", "Mode", "diagnose", "load_tools", "select"]

GROUP = "loopwise.kernels.tools"
Mode = Literal["proactive", "all", "raw"]
MODES: tuple[Mode, ...] = ("proactive", "all", "raw")


def _as_tool(obj: Any, where: str) -> Tool:
    """The tool object an entry point or module names (a class is instantiated)."""
    if isinstance(obj, type) and issubclass(obj, Tool):
        obj = obj()
    if not isinstance(obj, Tool):
        raise TypeError(f"{where} is not a loopwise tool (got {type(obj).__name__})")
    return obj


def _entry_point_tools() -> list[Tool]:
    return [_as_tool(ep.load(), f"entry point {ep.name} = {ep.value}") for ep in entry_points(group=GROUP)]


def _package_tools() -> list[Tool]:
    """Tools of this package's own modules, for a checkout that exposes no entry points."""
    package = importlib.import_module("loopwise.kernels.profile.tools")
    out = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if hasattr(module, "TOOL"):
            out.append(_as_tool(module.TOOL, module.__name__))
    return out


@functools.lru_cache(maxsize=1)
def load_tools() -> tuple[Tool, ...]:
    """Every registered tool, sorted by name; names are unique.

    Raises:
        ValueError: two tools share a name.
    """
    tools = _entry_point_tools() or _package_tools()
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"tools registered twice under group {GROUP}: {duplicates}")
    return tuple(sorted(tools, key=lambda t: t.name))


def select(classification: Classification | KernelClass | None, mode: Mode = "proactive",
           tools: tuple[Tool, ...] | None = None, also: tuple[str, ...] = ()) -> list[Tool]:
    """The tools to run on a kernel of this roofline class in this mode, and those named in
    ``also`` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    pool = load_tools() if tools is None else tools
    if mode == "raw":
        return []
    kernel_class = classification.kernel_class if isinstance(classification, Classification) else classification
    if mode == "all" or kernel_class is None:
        return list(pool)
    return [t for t in pool if kernel_class in t.applies_to or t.name in also]


def diagnose(inp: ToolInput, mode: Mode = "proactive", tools: tuple[Tool, ...] | None = None,
             also: tuple[str, ...] = ()) -> list[Finding]:
    """Findings of the selected tools on one kernel, highest score first (ties: tool name).

    A score is the share of the kernel's time at stake. A generic tool's symptom (warps stalled on
    memory, a memory-bound kernel below its ceiling) is the same lost time that a specific tool
    names the cause of (uncoalesced accesses, spills, a partial wave), so a generic finding keeps
    only the share the strongest specific finding leaves unexplained: ``score x (1 - specific)``.
    Precision findings (score 1.0 for a correctness matter, not time) do not discount.
    """
    chosen = select(inp.classification, mode, tools, also)
    generic = {t.name for t in chosen if t.generic}
    findings = [f for tool in chosen for f in tool.run(inp)]
    explained = max((f.score for f in findings if f.tool not in generic and f.score < 1.0), default=0.0)
    if explained > 0:
        findings = [_discounted(f, 1.0 - explained) if f.tool in generic else f for f in findings]
    return sorted(findings, key=lambda f: (-f.score, f.tool))


def _discounted(finding: Finding, share: float) -> Finding:
    evidence = {**finding.evidence, "unexplained_share": round(share, 4)}
    return Finding.make(finding.tool, finding.guidance, evidence, finding.score * share, finding.moves)
