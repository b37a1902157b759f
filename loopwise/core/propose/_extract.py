"""Pulls what a proposal carries out of a free-text reply (a Python file for kernels, a JSON object
for training-stage configs), or says exactly why it cannot."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from loopwise.core.engines import engines
from loopwise.core.propose._base import FailureReason, ProposalRole

_FENCE = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)[^`]*$")
_PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})
_NOTE_PREFIX = re.compile(r"^\s*(?:[*_#>\-]\s*)*(?:move|note|change)\s*[*_]*\s*:[*_\s]*", re.I)
_NOTE_MAX = 240


@dataclass(frozen=True)
class Block:
    """One fenced block: its language tag, its body, and whether a closing fence was found."""

    lang: str
    body: str
    closed: bool


@dataclass(frozen=True)
class Extracted:
    """The code and the one-line note found in a reply."""

    code: str
    note: str


@dataclass(frozen=True)
class ExtractFailure:
    """Why no code could be taken from a reply."""

    reason: FailureReason
    detail: str


def fenced_blocks(text: str) -> tuple[list[Block], list[str]]:
    """Splits markdown into fenced blocks and the prose lines outside them."""
    blocks: list[Block] = []
    prose: list[str] = []
    opening: re.Match[str] | None = None
    body: list[str] = []
    for line in text.splitlines():
        if opening is None:
            match = _FENCE.match(line)
            if match:
                opening, body = match, []
            else:
                prose.append(line)
            continue
        fence = opening["fence"]
        stripped = line.strip()
        if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
            blocks.append(Block(opening["lang"].lower(), "\n".join(body), True))
            opening = None
        else:
            body.append(line)
    if opening is not None:
        blocks.append(Block(opening["lang"].lower(), "\n".join(body), False))
    return blocks, prose


def _note(prose: list[str]) -> str:
    """The line that names the move: one starting with ``Move:``, else the first prose line."""
    lines = [line.strip() for line in prose if line.strip()]
    for line in lines:
        if _NOTE_PREFIX.match(line):
            return _NOTE_PREFIX.sub("", line)[:_NOTE_MAX].strip()
    return lines[0][:_NOTE_MAX] if lines else ""


def extract_python(text: str, *, truncated: bool = False) -> Extracted | ExtractFailure:
    """Takes the largest fenced Python block (the last one on a tie) that parses.

    Args:
        text: the reply.
        truncated: the server said the reply stopped at its token limit.

    Returns:
        The code and note, or why there is none: an unterminated block is ``TRUNCATED``,
        no block ``NO_CODE``, code that ``ast.parse`` rejects ``SYNTAX_ERROR``.
    """
    blocks, prose = fenced_blocks(text)
    if blocks and not blocks[-1].closed:
        cause = "the reply hit its token limit" if truncated else "the reply ends inside it"
        return ExtractFailure(FailureReason.TRUNCATED, f"unterminated code block ({cause})")
    tagged = [b for b in blocks if b.lang in _PYTHON_TAGS]
    candidates = tagged or [b for b in blocks if not b.lang]
    if not candidates:
        detail = "no ```python block in the reply"
        if truncated:
            return ExtractFailure(FailureReason.TRUNCATED, detail + " (it hit its token limit)")
        return ExtractFailure(FailureReason.NO_CODE, detail)
    best = max(reversed(candidates), key=lambda b: len(b.body.strip()))
    code = best.body.strip("\n") + "\n"
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return ExtractFailure(FailureReason.SYNTAX_ERROR, f"line {exc.lineno}: {exc.msg}")
    return Extracted(code, _note(prose))


_JSON_TAGS = frozenset({"json", "jsonc"})


def extract_json(text: str, *, truncated: bool = False) -> Extracted | ExtractFailure:
    """Takes the last fenced JSON block (tagged ``json``, else untagged) that holds a JSON object.

    Returns:
        The object, re-serialized with sorted keys, and the note; or why there is none: an
        unterminated block is ``TRUNCATED``, no block ``NO_CODE``, a block that is not a JSON
        object ``SYNTAX_ERROR``.
    """
    blocks, prose = fenced_blocks(text)
    if blocks and not blocks[-1].closed:
        cause = "the reply hit its token limit" if truncated else "the reply ends inside it"
        return ExtractFailure(FailureReason.TRUNCATED, f"unterminated code block ({cause})")
    candidates = [b for b in blocks if b.lang in _JSON_TAGS] or [b for b in blocks if not b.lang]
    if not candidates:
        detail = "no ```json block in the reply"
        if truncated:
            return ExtractFailure(FailureReason.TRUNCATED, detail + " (it hit its token limit)")
        return ExtractFailure(FailureReason.NO_CODE, detail)
    last_error = ""
    for block in reversed(candidates):
        try:
            value = json.loads(block.body)
        except json.JSONDecodeError as exc:
            last_error = f"line {exc.lineno}: {exc.msg}"
            continue
        if isinstance(value, dict):
            return Extracted(json.dumps(value, sort_keys=True), _note(prose))
        last_error = f"a JSON {type(value).__name__}, not an object"
    return ExtractFailure(FailureReason.SYNTAX_ERROR, last_error)


def _json_reply(kind: str, role: ProposalRole | None) -> bool:
    if role is not None and ProposalRole(role).answers_in_json:
        return True
    registered = engines().get(kind)
    return registered is not None and registered.reply == "json"


def reply_block(kind: str, role: ProposalRole | None = None) -> str:
    """The fenced block a reply to an engine carries, as prompts and instructions name it:
    ```json where the engine registered ``json`` replies or the role answers in JSON (the analyst,
    the reviewer), else ```python."""
    return "```json" if _json_reply(kind, role) else "```python"


def extract_for(kind: str, text: str, *, truncated: bool = False,
                role: ProposalRole | None = None) -> Extracted | ExtractFailure:
    """What a reply to an engine in ``role`` carries: a JSON object where the engine registered
    ``json`` replies or the role answers in JSON, a Python file otherwise (and for a kind no
    engine registered)."""
    if _json_reply(kind, role):
        return extract_json(text, truncated=truncated)
    return extract_python(text, truncated=truncated)
