"""Ranked search over a source root's index, and bounded reads of its files."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from loopwise.errors import UserError
from loopwise.kernels.codesearch._index import connect, ensure_index, resolve_root
from loopwise.kernels.codesearch._terms import (
    WORD,
    Query,
    expand,
    name_key,
    parse_query,
)

# bm25 weights of the columns (path, symbols, scope, body): a defined name counts most, then the
# file's path, then the declaration a window belongs to, then the body text.
WEIGHTS = (4.0, 10.0, 2.0, 1.0)
EXACT_BONUS = 0.5  # share added to the score of a chunk per name it defines that the query means (two at most)
MAX_LIMIT = 50
SNIPPET_LINES = 8
SNIPPET_WIDTH = 160
READ_MAX_LINES = 200
PER_FILE = 1  # hits from one file before other files get a turn
_WORDY = re.compile(r"[A-Za-z0-9]{2}")
_POOL = 10  # candidates fetched per wanted hit (at least _POOL_MIN), re-ranked and de-duplicated
_POOL_MIN = 100


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        path: the file, relative to the source root (POSIX separators).
        start_line: the chunk's first line, 1-based.
        end_line: the chunk's last line, inclusive.
        symbols: the names the chunk defines.
        snippet: the chunk's best-matching lines (at most 8, each cut at 160 characters).
        snippet_line: the line number of the snippet's first line.
        score: higher is better; comparable within one query only.
    """

    path: str
    start_line: int
    end_line: int
    symbols: tuple[str, ...]
    snippet: str
    snippet_line: int
    score: float


def _match(db, expression: str, pool: int) -> list[tuple]:
    sql = ("SELECT c.path, c.start_line, c.end_line, c.symbols, -bm25(fts, ?, ?, ?, ?) AS score "
           "FROM fts JOIN chunks c ON c.id = fts.rowid WHERE fts MATCH ? ORDER BY bm25(fts, ?, ?, ?, ?) LIMIT ?")
    return db.execute(sql, (*WEIGHTS, expression, *WEIGHTS, pool)).fetchall()


def _rank(query: Query, strict: list[tuple], loose: list[tuple]) -> list[tuple]:
    """Chunks matching every word first, then the rest; a chunk defining a name the query means
    gains a bonus."""
    out, seen = [], set()
    for tier, rows in enumerate((strict, loose)):
        for path, start, end, symbols, score in rows:
            if (path, start) in seen:
                continue
            seen.add((path, start))
            names = tuple(symbols.split())
            exact = sum(1 for name in names if name_key(name) in query.names)
            out.append((-tier, score * (1.0 + EXACT_BONUS * min(exact, 2)), path, start, end, names))
    out.sort(key=lambda row: (row[0], row[1]), reverse=True)
    return out


def _snippet(lines: list[str], start: int, end: int, query: Query) -> tuple[str, int]:
    """The window of the chunk whose lines hold the most query terms (whole names count double),
    without leading or trailing lines that hold no word (blank lines, ``////`` rules)."""
    whole = {w.strip("_").lower() for w in query.words}
    body = lines[start - 1:end]
    scores = []
    for line in body:
        terms = {t for word in WORD.findall(line) for t in expand(word).split()}
        scores.append(len(terms & query.terms) + len(terms & whole))
    best_score, best = max(((sum(scores[i:i + SNIPPET_LINES]), -i) for i in range(len(body))), default=(0, 0))
    first = -best if best_score else 0
    if best_score:  # start one line above the first match: the same matches, less lead-in
        first = max(first, next(i for i in range(first, len(body)) if scores[i]) - 1)
    picked = body[first:first + SNIPPET_LINES]
    while len(picked) > 1 and not _WORDY.search(picked[0]):
        picked, first = picked[1:], first + 1
    while len(picked) > 1 and not _WORDY.search(picked[-1]):
        picked = picked[:-1]
    return "\n".join(line.rstrip()[:SNIPPET_WIDTH] for line in picked), start + first


def _file_lines(root: Path, rel: str, cache: dict[str, list[str]]) -> list[str]:
    if rel not in cache:
        cache[rel] = (root / rel).read_text(encoding="utf-8", errors="replace").split("\n")
    return cache[rel]


def search(query: str, limit: int = 10, root: str | os.PathLike | None = None) -> list[Hit]:
    """Finds the chunks of the CUTLASS / CuTe sources that best match ``query``.

    Builds (or reuses) the cached index of the root first.

    Args:
        query: free text, names or parts of names (``TMA warp specialized``, ``make_tiled_copy``,
            ``cute::gemm``, ``KernelTmaWarpSpecializedCooperative``).
        limit: the most hits to return (1 to 50).
        root: a CUTLASS checkout; None for ``$LOOPWISE_CUTLASS_ROOT`` or the ``nvidia-cutlass`` wheel.

    Returns:
        Hits, best first; overlapping chunks of one file appear once.

    Raises:
        UserError: no sources to search, a bad root, an empty query or a bad limit.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise UserError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    parsed = parse_query(query)
    if not parsed.words:
        raise UserError(f"nothing to search for in {query!r}: give names or words")
    info = ensure_index(resolve_root(root))
    pool = max(_POOL_MIN, limit * _POOL)
    with contextlib.closing(connect(info)) as db:
        strict = _match(db, parsed.strict, pool)
        loose = _match(db, parsed.loose, pool) if len(strict) < pool and len(parsed.words) > 1 else []
    return _hits(info.root, parsed, _rank(parsed, strict, loose), limit)


def _hits(root: Path, query: Query, ranked: list[tuple], limit: int) -> list[Hit]:
    """The best ``limit`` chunks, no two overlapping, at most ``PER_FILE`` per file unless too few."""
    picked: list[tuple] = []
    for cap in (PER_FILE, None):
        for row in ranked:
            _, _, path, start, end, _ = row
            same_file = [r for r in picked if r[2] == path]
            if len(picked) == limit or row in picked or (cap is not None and len(same_file) >= cap):
                continue
            if not any(r[3] <= end and start <= r[4] for r in same_file):
                picked.append(row)
    picked.sort(key=lambda row: (row[0], row[1]), reverse=True)
    texts: dict[str, list[str]] = {}
    hits = []
    for _, score, path, start, end, names in picked:
        snippet, first = _snippet(_file_lines(root, path, texts), start, end, query)
        hits.append(Hit(path=path, start_line=start, end_line=end, symbols=names, snippet=snippet,
                        snippet_line=first, score=round(score, 4)))
    return hits


def read_source(path: str, start: int, end: int, root: str | os.PathLike | None = None) -> str:
    """Lines ``start`` to ``end`` (1-based, inclusive) of a file under the source root.

    At most 200 lines are returned: a longer range is cut at ``start + 199``; a range past the
    end of the file is cut at its last line.

    Raises:
        UserError: the path leaves the root or is not a file there, or the range is empty or
            starts past the end of the file.
    """
    base = resolve_root(root)
    target = (base / path).resolve()
    if not target.is_relative_to(base.resolve()):
        raise UserError(f"{path}: outside the source root {base}")
    if not target.is_file():
        raise UserError(f"{path}: no such file under {base}")
    if start < 1 or end < start:
        raise UserError(f"bad line range {start}-{end}: lines are numbered from 1 and end >= start")
    lines = target.read_text(encoding="utf-8", errors="replace").split("\n")
    if start > len(lines):
        raise UserError(f"{path} has {len(lines)} lines; line {start} is past its end")
    end = min(end, start + READ_MAX_LINES - 1, len(lines))
    return "\n".join(lines[start - 1:end])
