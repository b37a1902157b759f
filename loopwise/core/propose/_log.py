"""Cuts a compiler or runtime log down to what a model needs to fix the code: the error lines and
a few lines around each, within a character budget."""

from __future__ import annotations

import re

_RELEVANT = re.compile(
    r"error|exception|traceback|failed|failure|assert|mismatch|outside atol|not defined|no attribute"
    r"|^\s*\^+\s*$|^\s*File \"|^\s*at \d+:\d+|^\s*line \d+", re.I)
_GAP = "[...]"


def _windows(lines: list[str], context: int) -> list[tuple[int, int]]:
    """Merged [start, end) line ranges around every relevant line."""
    spans: list[tuple[int, int]] = []
    for i, line in enumerate(lines):
        if not _RELEVANT.search(line):
            continue
        start, end = max(0, i - context), min(len(lines), i + context + 1)
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _fit(text: str, budget: int) -> str:
    """``text`` within ``budget`` characters: its head and its tail (the last error) around a gap."""
    if len(text) <= budget:
        return text
    half = (budget - len(_GAP) - 2) // 2
    return f"{text[:half].rstrip()}\n{_GAP}\n{text[len(text) - half:].lstrip()}"


def log_excerpt(log: str, budget: int = 4000, context: int = 3) -> str:
    """The relevant part of ``log``, at most ``budget`` characters.

    A log within the budget is kept whole. A longer one keeps every line that names an error (an
    exception, a traceback frame, a caret under the code, a mismatch) with ``context`` lines on
    each side, ``[...]`` between the pieces; if that is still too long, its head and tail.

    Args:
        log: the log as the sandbox wrote it.
        budget: the most characters returned.
        context: lines kept before and after each relevant line.
    """
    text = log.strip("\n")
    if len(text) <= budget:
        return text
    lines = text.splitlines()
    spans = _windows(lines, context) or [(max(0, len(lines) - 2 * context), len(lines))]
    pieces = ["\n".join(lines[start:end]) for start, end in spans]
    return _fit(f"\n{_GAP}\n".join(pieces), budget)
