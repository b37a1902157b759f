"""Where the CUTLASS sources are, and their SQLite FTS5 index, built once and cached.

The index lives under the loopwise cache folder, one file per source root, and is rebuilt when the
fingerprint changes: the index format version plus every indexed file's path, size and mtime.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loopwise.core.cache import cache_root
from loopwise.core.files import replacing
from loopwise.errors import UserError
from loopwise.kernels.codesearch._chunks import CXX_SUFFIXES, chunk_source
from loopwise.kernels.codesearch._terms import path_terms, text_terms

FORMAT_VERSION = 1  # bump when chunking, terms or the schema change: old indexes are rebuilt
ROOT_ENV = "LOOPWISE_CUTLASS_ROOT"
PIP_HINT = "pip install nvidia-cutlass"
INDEXED_DIRS = ("include", "examples", "tools/util", "media/docs")
SUFFIXES = CXX_SUFFIXES | {".py", ".md"}
_BATCH = 2000
_BUILDING = threading.Lock()

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, path TEXT NOT NULL, start_line INTEGER NOT NULL,
                     end_line INTEGER NOT NULL, symbols TEXT NOT NULL, scope TEXT NOT NULL);
CREATE VIRTUAL TABLE fts USING fts5(path, symbols, scope, body, content='', columnsize=1,
                                    tokenize="unicode61 tokenchars '_'");
"""


@dataclass(frozen=True)
class IndexInfo:
    """One source root's index.

    Attributes:
        root: the source root (holding ``include/`` and ``examples/``).
        path: the SQLite file.
        files: source files indexed.
        chunks: chunks indexed.
        size_bytes: the SQLite file's size.
        build_s: seconds the last build took.
        reused: True when this call found the index up to date and built nothing.
    """

    root: Path
    path: Path
    files: int
    chunks: int
    size_bytes: int
    build_s: float
    reused: bool


def wheel_root() -> Path | None:
    """The sources shipped in the ``nvidia-cutlass`` wheel (``cutlass_library/source``), if installed."""
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(next(iter(spec.submodule_search_locations))) / "source"
    return source if source.is_dir() else None


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The source root to search: ``root``, else ``$LOOPWISE_CUTLASS_ROOT``, else the wheel's.

    Raises:
        UserError: the folder is not a CUTLASS checkout, or nothing was given and the
            ``nvidia-cutlass`` wheel is not installed.
    """
    given = root if root is not None else os.environ.get(ROOT_ENV) or None
    if given is None:
        found = wheel_root()
        if found is None:
            raise UserError(f"the CUTLASS sources are not installed: {PIP_HINT} "
                            "(or pass --root PATH to a CUTLASS checkout)")
        return found
    folder = Path(given).expanduser()
    if not folder.is_dir():
        raise UserError(f"{given}: not a folder (expected a CUTLASS checkout with include/ and examples/)")
    include = folder / "include"
    if not ((include / "cute").is_dir() or (include / "cutlass").is_dir()) or not (folder / "examples").is_dir():
        raise UserError(f"{given}: not a CUTLASS checkout (expected include/cute or include/cutlass, "
                        "and examples/)")
    return folder.resolve()


def source_files(root: Path) -> list[Path]:
    """The files indexed under ``root``, sorted."""
    found = [path for folder in INDEXED_DIRS if (root / folder).is_dir()
             for path in (root / folder).rglob("*") if path.suffix.lower() in SUFFIXES and path.is_file()]
    return sorted(found)


def fingerprint(root: Path, files: list[Path]) -> str:
    """A hash of the format version and every file's relative path, size and mtime."""
    digest = hashlib.sha256(f"loopwise-codesearch {FORMAT_VERSION}\n".encode())
    for path in files:
        stat = path.stat()
        digest.update(f"{path.relative_to(root).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def index_path(root: Path) -> Path:
    """Where the index of ``root`` is cached."""
    key = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return cache_root() / "codesearch" / f"{key}.sqlite"


def _meta(path: Path) -> dict[str, str]:
    """The stored metadata of an index file; empty when it is missing or unreadable."""
    if not path.is_file():
        return {}
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return dict(db.execute("SELECT key, value FROM meta"))
    except sqlite3.Error:
        return {}


def _rows(root: Path, files: list[Path]) -> Iterator[tuple[tuple[str, int, int, str, str], tuple[str, ...]]]:
    """(chunk row, fts row) pairs for every chunk of every file."""
    for path in files:
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        where = path_terms(rel)
        for chunk in chunk_source(rel, text):
            body = "\n".join(lines[chunk.start_line - 1:chunk.end_line])
            symbols, scope = " ".join(chunk.symbols), " ".join(chunk.scope)
            yield ((rel, chunk.start_line, chunk.end_line, symbols, scope),
                   (where, text_terms(symbols), text_terms(scope), text_terms(body)))


def _build(root: Path, files: list[Path], stamp: str, dest: Path) -> None:
    """Writes a fresh index to a temporary file and moves it over ``dest`` (readers never see half)."""
    with replacing(dest) as tmp:
        _fill(sqlite3.connect(tmp), root, files, stamp)


def _fill(db: sqlite3.Connection, root: Path, files: list[Path], stamp: str) -> None:
    """Writes the index of ``files`` into the empty database ``db`` and closes it."""
    start = time.perf_counter()
    try:
        db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _SCHEMA)
        count, rows = 0, _rows(root, files)
        while batch := list(itertools.islice(rows, _BATCH)):
            db.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?)",
                           [(count + k, *chunk) for k, (chunk, _) in enumerate(batch, 1)])
            db.executemany("INSERT INTO fts(rowid, path, symbols, scope, body) VALUES (?, ?, ?, ?, ?)",
                           [(count + k, *terms) for k, (_, terms) in enumerate(batch, 1)])
            count += len(batch)
        db.execute("INSERT INTO fts(fts) VALUES ('optimize')")
        meta = {"root": str(root), "fingerprint": stamp, "version": str(FORMAT_VERSION), "files": str(len(files)),
                "chunks": str(count), "build_s": f"{time.perf_counter() - start:.3f}"}
        db.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))
        db.commit()
    finally:
        db.close()


def ensure_index(root: Path, *, rebuild: bool = False) -> IndexInfo:
    """The up-to-date index of ``root``: the cached one when its fingerprint matches, else a new one.

    Args:
        root: a source root from ``resolve_root``.
        rebuild: build even when the cached index is up to date.
    """
    files = source_files(root)
    if not files:
        raise UserError(f"{root}: no C++ sources under {', '.join(INDEXED_DIRS)}")
    stamp, dest = fingerprint(root, files), index_path(root)
    with _BUILDING:  # threads of one process build an index once; processes may race, harmlessly
        meta = _meta(dest)
        reused = not rebuild and meta.get("fingerprint") == stamp and meta.get("root") == str(root)
        if not reused:
            _build(root, files, stamp, dest)
            meta = _meta(dest)
    return IndexInfo(root=root, path=dest, files=int(meta["files"]), chunks=int(meta["chunks"]),
                     size_bytes=dest.stat().st_size, build_s=float(meta["build_s"]), reused=reused)


def connect(info: IndexInfo) -> sqlite3.Connection:
    """A read-only connection to an index."""
    return sqlite3.connect(f"file:{info.path}?mode=ro", uri=True)

