"""Splits a source file into search chunks: whole top-level declarations where they are short,
overlapping windows where they are long, each with the names it defines.

C++ is read with a light scanner, not a compiler: comments, string literals and preprocessor
lines are blanked, then braces are tracked with what opened them (a namespace, a type, or a body).
A name counts as defined when it is declared at namespace or class scope: types (struct, class,
union, enum), functions, and namespace-level ``using`` aliases and typedefs; ``#define`` names too.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

MAX_LINES = 80  # a declaration up to this long is one chunk; small neighbours are merged up to it
WINDOW = 60  # a longer declaration is cut into windows of this many lines ...
STEP = 45  # ... starting this many lines apart (15 lines of overlap)

CXX_SUFFIXES = frozenset({".h", ".hpp", ".cuh", ".cu", ".cpp", ".cc", ".inl", ".hxx"})

_BLANKED = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.DOTALL)
_EVENT = re.compile(r"[{};]")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)")
_NAMESPACE = re.compile(r"\bnamespace\b|\bextern\s*\"\"")
_TYPE = re.compile(r"^\s*(?:\[\[[^\]]*\]\]\s*)*(?:typedef\s+)?(struct|class|union|enum)\b(?:\s+class\b|\s+struct\b)?")
_COLON = re.compile(r"(?<!:):(?!:)")
_USING = re.compile(r"^\s*using\s+([A-Za-z_]\w*)\s*=")
_TYPEDEF = re.compile(r"^\s*typedef\b.*?([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", re.DOTALL)
_CALLABLE = re.compile(r"(operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*)\s*\(")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_SKIPPED = frozenset({"alignas", "decltype", "__launch_bounds__", "__attribute__", "__align__", "__declspec"})
_NOT_NAMES = frozenset({
    "alignof", "sizeof", "noexcept", "static_assert", "requires", "if", "for", "while", "switch", "return",
    "final", "override", "const", "volatile", "struct", "class", "union", "enum", "typename", "template",
})
_MACRO = re.compile(r"^(?=[A-Z0-9_]*_|[A-Z0-9]{4})[A-Z0-9_]+$")  # CUTE_STATIC_ASSERT, not a struct S
_OPERATOR_END = re.compile(r"\boperator\s*[^\w\s]{0,2}$")
_SPECIAL_BODY = re.compile(r"\s*(?:default|delete|0)\s*$")
_PY_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Chunk:
    """A line range of one file and the names it defines.

    Attributes:
        start_line: the first line, 1-based.
        end_line: the last line, inclusive.
        symbols: the names defined in the range, in order of appearance.
        scope: the declaration a window was cut from (empty for whole declarations).
    """

    start_line: int
    end_line: int
    symbols: tuple[str, ...]
    scope: tuple[str, ...] = ()


def _blank(text: str) -> list[str]:
    """The lines with comments and literals removed (line numbers kept)."""
    def keep_lines(match: re.Match[str]) -> str:
        found = match.group()
        if found[0] in "\"'":
            return '""'
        return "\n" * found.count("\n")

    return _BLANKED.sub(keep_lines, text).split("\n")


def _strip_template(stmt: str) -> str:
    """The statement without leading ``template <...>`` heads (angle brackets balanced)."""
    rest = stmt.lstrip()
    while rest.startswith("template"):
        opening = rest.find("<")
        if opening < 0:
            return rest
        depth = 0
        for i in range(opening, len(rest)):
            depth += {"<": 1, ">": -1}.get(rest[i], 0)
            if depth == 0:
                rest = rest[i + 1:].lstrip()
                break
        else:
            return rest
    return rest


def _type_name(decl: str) -> str | None:
    """The name of a ``struct Foo : Base``, ``class alignas(16) Foo<...>`` or ``enum class Foo``."""
    match = _TYPE.match(decl)
    if match is None:
        return None
    head = _COLON.split(decl[match.end():], maxsplit=1)[0].split("<", 1)[0].split("{", 1)[0]
    names = [n for n in _IDENT.findall(head) if n not in _NOT_NAMES and n not in _SKIPPED]
    return names[-1] if names else None


def _top_level_assignment(decl: str) -> bool:
    """Whether ``decl`` has an ``=`` outside parentheses that starts an initializer: not a default
    argument, not a comparison, not ``operator=`` / ``operator+=``, not ``= default`` / ``= 0``."""
    if "=" not in decl:
        return False
    depth = 0
    for i, char in enumerate(decl):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "=" and depth == 0 and decl[i - 1:i] not in ("=", "!", "<", ">") \
                and decl[i + 1:i + 2] != "=" and not _OPERATOR_END.search(decl, 0, i) \
                and not _SPECIAL_BODY.match(decl, i + 1):
            return True
    return False


def _function_name(decl: str) -> str | None:
    """The name of a function declared or defined by ``decl``, if it declares one."""
    if decl.count("(") != decl.count(")") or _top_level_assignment(decl):
        return None  # inside an expression, or a variable with an initializer
    for match in _CALLABLE.finditer(decl):
        name = match.group(1)
        if name in _SKIPPED:
            continue
        if name in _NOT_NAMES or (not decl[:match.start()].strip() and _MACRO.match(name)):
            return None  # static_assert(...), or a macro invocation such as CUTE_STATIC_ASSERT_V(...)
        return re.sub(r"\s+", "", name)
    return None


def _declared(stmt: str, at_namespace: bool) -> str | None:
    """The name a statement at namespace or class scope declares, if any."""
    decl = _strip_template(stmt)
    if not decl:
        return None
    if (name := _type_name(decl)) is not None:
        return name
    using = _USING.match(decl)
    if using:
        return using.group(1) if at_namespace else None
    if decl.startswith("typedef"):
        found = _TYPEDEF.match(decl)
        return found.group(1) if found and at_namespace else None
    return _function_name(decl)


class _Scanner:
    """Walks blanked C++ lines; records defined names and where top-level declarations end.

    Each open brace remembers what opened it: ``ns`` (a namespace), ``type`` (a class body),
    ``body`` (a function body) or ``init`` (a brace inside an expression, like ``Int<3>{}``, after
    which the enclosing statement goes on).
    """

    def __init__(self) -> None:
        self.stack: list[tuple[str, str]] = []  # (kind, the statement text before the brace)
        self.counts = {"ns": 0, "type": 0, "body": 0, "init": 0}
        self.stmt = ""
        self.symbols: list[tuple[int, str]] = []
        self.unit_ends: list[int] = []  # 0-based lines after which the scope is namespace-level again

    def _at_declarations(self) -> bool:
        return not (self.counts["body"] or self.counts["init"])

    def _at_namespace(self) -> bool:
        return len(self.stack) == self.counts["ns"]

    def _push(self, kind: str, before: str = "") -> None:
        self.stack.append((kind, before))
        self.counts[kind] += 1

    def _open(self, line_no: int, stmt: str) -> None:
        if not self._at_declarations():
            self._push("body")
        elif _NAMESPACE.search(stmt) and self._at_namespace():
            self._push("ns")
        elif (name := _declared(stmt, self._at_namespace())) is not None:
            self.symbols.append((line_no, name))
            decl = _strip_template(stmt)
            self._push("type" if _TYPE.match(decl) else "body" if "(" in decl else "init", stmt)
        else:
            self._push("init", stmt)

    def _close(self) -> None:
        if self.stack:
            kind, before = self.stack.pop()
            self.counts[kind] -= 1
            if kind == "init":
                self.stmt = before + "{}"

    def feed(self, line_no: int, line: str) -> None:
        pos = 0
        for event in _EVENT.finditer(line):
            stmt = self.stmt + line[pos:event.start()]
            pos, self.stmt = event.end(), ""
            char = event.group()
            if char == "{":
                self._open(line_no, stmt)
            elif char == "}":
                self._close()
            elif self._at_declarations() and (name := _declared(stmt, self._at_namespace())):
                self.symbols.append((line_no, name))
        self.stmt += line[pos:] + "\n"
        if self._at_namespace() and not self.stmt.strip():
            self.stmt = ""
            self.unit_ends.append(line_no)


def _scan_cxx(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, str]]]:
    """Top-level units as 0-based inclusive line ranges, and (line, name) of defined names."""
    scanner = _Scanner()
    continued = False
    for number, line in enumerate(_blank(text)):
        if continued or line.lstrip().startswith("#"):
            define = _DEFINE.match(line) if not continued else None
            if define:
                scanner.symbols.append((number, define.group(1)))
            continued = line.rstrip().endswith("\\")
            line = ""
        scanner.feed(number, line)
    units, start = [], 0
    for end in scanner.unit_ends:
        if end >= start:
            units.append((start, end))
            start = end + 1
    if start <= number:  # unbalanced braces: the rest is one unit
        units.append((start, number))
    return units, scanner.symbols


def _windows(start: int, end: int) -> list[tuple[int, int]]:
    """Overlapping windows that cover ``start..end`` (0-based, inclusive)."""
    out, first = [], start
    while True:
        last = min(first + WINDOW - 1, end)
        out.append((first, last))
        if last >= end:
            return out
        first += STEP


_Range = tuple[int, int, int | None]
"""0-based first and last line, and for a window the first line of the declaration it was cut from."""


def _pack(units: list[tuple[int, int]]) -> list[_Range]:
    """Merges short units up to ``MAX_LINES``; cuts long ones into windows."""
    out: list[_Range] = []
    current: tuple[int, int] | None = None
    for start, end in units:
        if end - start + 1 > MAX_LINES:
            if current:
                out.append((*current, None))
                current = None
            out.extend((a, b, start) for a, b in _windows(start, end))
        elif current and end - current[0] + 1 > MAX_LINES:
            out.append((*current, None))
            current = (start, end)
        else:
            current = (current[0], end) if current else (start, end)
    if current:
        out.append((*current, None))
    return out


def _chunks(ranges: list[_Range], symbols: list[tuple[int, str]], lines: list[str]) -> list[Chunk]:
    symbols = sorted(symbols, key=lambda item: item[0])
    at = [line for line, _ in symbols]
    out = []
    for start, end, unit_start in ranges:
        while start < end and not lines[start].strip():
            start += 1  # leading blank lines belong to no one
        inside = symbols[bisect.bisect_left(at, start):bisect.bisect_right(at, end)]
        names = tuple(dict.fromkeys(name for _, name in inside))
        owner: tuple[str, ...] = ()
        if unit_start is not None:  # a window: name the declaration it belongs to
            first = bisect.bisect_left(at, unit_start)
            owner = (symbols[first][1],) if first < len(at) and at[first] <= end else ()
        out.append(Chunk(start + 1, end + 1, names, owner))
    return out


def chunk_source(path: str, text: str) -> list[Chunk]:
    """Chunks of one file: declaration-aware for C++, plain windows (with names) otherwise.

    Args:
        path: the file's name; its suffix picks the reader.
        text: the file's content.
    """
    lines = text.split("\n")
    if not text.strip():
        return []
    suffix = path[path.rfind("."):].lower() if "." in path else ""
    if suffix in CXX_SUFFIXES:
        units, symbols = _scan_cxx(text)
        ranges = _pack(units)
    elif suffix == ".py":
        symbols = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _PY_DEF.match(line))]
        ranges = [(a, b, None) for a, b in _windows(0, len(lines) - 1)]
    else:  # markdown: headings are context, not defined names
        return [Chunk(a + 1, b + 1, (), _headings(lines, a, b)) for a, b in _windows(0, len(lines) - 1)]
    return _chunks(ranges, symbols, lines)


def _headings(lines: list[str], start: int, end: int) -> tuple[str, ...]:
    """The markdown headings in force over ``start..end``: the last one before it and those within."""
    found = [(i, m.group(1)) for i, line in enumerate(lines[:end + 1]) if (m := _MD_HEADING.match(line))]
    before = [title for i, title in found if i < start][-1:]
    return tuple(before + [title for i, title in found if i >= start])
