"""``scan``: run every static rule over a candidate and turn findings into ``Reason`` records."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator

from loopwise.kernels.check import _control, _precision, _reference, _tampering
from loopwise.kernels.check._codes import CODES, RuleMatch
from loopwise.kernels.check._source import SourceIndex
from loopwise.kernels.evaluate.result import Reason

POLICIES = ("fp32", "relaxed")
# Enough occurrences of one code for a person to see the pattern; the rest only add noise.
MAX_PER_CODE = 5

Rule = Callable[[SourceIndex], Iterable[RuleMatch]]

RULES: tuple[Rule, ...] = (
    _control.find_no_custom_kernel,
    _tampering.find_patches,
    _tampering.find_threads,
    _tampering.find_lazy,
    _reference.find_reference_access,
    _reference.find_reference_call,
    _control.find_fallbacks,
    _tampering.find_processes,
    _tampering.find_environment_reads,
    _control.find_streams,
    _control.find_pointer_caches,
    _precision.find_precision,
)


def scan(source: str, *, policy: str = "fp32", filename: str = "<candidate>") -> list[Reason]:
    """Statically check a KernelBench candidate for exploits and forbidden shortcuts.

    Comments and docstrings never count: Python is read as an AST, and only C/CUDA text embedded
    in string literals is read with patterns (after its own comments are removed).

    Args:
        source: the candidate's Python source.
        policy: ``fp32`` rejects reduced-precision math; ``relaxed`` reports it as ``info``.
        filename: shown in the evidence of every reason.

    Returns:
        The reasons found, ordered by line; empty for a clean candidate. ``reject`` reasons decide
        the verdict, ``flag`` reasons ask for review.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown precision policy {policy!r}; expected one of {POLICIES}")
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as error:
        line = error.lineno or 0
        finding = RuleMatch("syntax_error", line, f"Python syntax error ({error.msg})",
                          "the candidate does not parse")
        return [_reason(finding, policy, filename)]
    except ValueError as error:  # e.g. NUL bytes in the source
        return [_reason(RuleMatch("syntax_error", 0, f"Unreadable source ({error})"), policy, filename)]
    index = SourceIndex(tree)
    findings: list[RuleMatch] = []
    if index.modelnew is None and "ModelNew" not in _module_names(tree):
        last = max((getattr(n, "end_lineno", 0) or 0 for n in tree.body), default=1)
        findings.append(RuleMatch("missing_modelnew", 1, "No class ModelNew is defined",
                                "the judge has nothing to build", place=f"in lines 1 to {last}"))
    for rule in RULES:
        findings.extend(rule(index))
    return [_reason(f, policy, filename) for f in _deduplicate(findings)]


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name for a in stmt.names)
    return names


def _deduplicate(findings: Iterable[RuleMatch]) -> Iterator[RuleMatch]:
    seen: set[tuple[str, int]] = set()
    per_code: dict[str, int] = {}
    for finding in sorted(findings, key=lambda f: (f.line, f.code)):
        key = (finding.code, finding.line)
        if key in seen or per_code.get(finding.code, 0) >= MAX_PER_CODE:
            continue
        seen.add(key)
        per_code[finding.code] = per_code.get(finding.code, 0) + 1
        yield finding


def _reason(finding: RuleMatch, policy: str, filename: str) -> Reason:
    severity = finding.severity or CODES[finding.code].severity
    if finding.code == "precision_downgrade" and policy == "relaxed":
        severity = "info"
    evidence = {"line": finding.line, "file": filename, "source": "static", **finding.evidence}
    return Reason(code=finding.code, message=finding.message(), severity=severity, evidence=evidence)
