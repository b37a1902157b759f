"""The durable run store: one directory per run, holding ``run.sqlite`` and ``artifacts/``."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from loopwise import __version__
from loopwise.core.files import fsync_dir, replacing
from loopwise.core.store._artifact_files import ArtifactFiles
from loopwise.core.store._base import RunStore
from loopwise.core.store._records import (
    ArtifactError,
    ArtifactInfo,
    Event,
    RunMeta,
    artifact_bytes,
    check_event_fields,
    check_run_id,
    check_sha,
    decode_payload,
    encode_payload,
    new_run_id,
    sha256_hex,
)
from loopwise.errors import UserError

SCHEMA_VERSION = 1
"""The layout of ``run.sqlite`` this code writes, kept in ``PRAGMA user_version``.

The ``meta`` table stays a key/value table in every version, so ``list_runs`` can read any run.
"""

DB_NAME = "run.sqlite"
ARTIFACTS_DIR = "artifacts"
BUSY_TIMEOUT_MS = 10_000  # a second process reading or writing the same run waits, not fails
_BATCH = 512  # events read per query; no cursor stays open while the caller holds an event

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        key TEXT,
        payload TEXT NOT NULL)""",
    "CREATE INDEX events_by_kind_key ON events (kind, key)",
    """CREATE TABLE artifacts (
        sha256 TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        media_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        created REAL NOT NULL)""",
    # Resume replays the log, so a rewritten event would silently change what a run did.
    """CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
    """CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
    """CREATE TRIGGER meta_no_update BEFORE UPDATE ON meta
        BEGIN SELECT RAISE(ABORT, 'run meta is fixed at creation'); END""",
    """CREATE TRIGGER meta_no_delete BEFORE DELETE ON meta
        BEGIN SELECT RAISE(ABORT, 'run meta is fixed at creation'); END""",
)
_META_KEYS = ("run_id", "kind", "created", "loopwise_version", "config_text")
_EVENT_COLUMNS = "seq, ts, kind, key, payload"


def _connect(db_path: Path, mode: str) -> sqlite3.Connection:
    """Opens ``db_path``; only ``mode="rwc"`` may create it (the others are ``rw`` and ``ro``)."""
    try:
        conn = sqlite3.connect(
            f"{db_path.resolve().as_uri()}?mode={mode}",
            uri=True,
            isolation_level=None,  # autocommit: each append is its own committed transaction
            timeout=BUSY_TIMEOUT_MS / 1000,
            check_same_thread=False,  # shared between threads; every use holds the store's lock
        )
    except sqlite3.Error as exc:
        raise UserError(f"{db_path}: cannot open ({exc})") from None
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def _configure_for_writing(conn: sqlite3.Connection, db_path: Path) -> None:
    # WAL lets readers (a report, `loopwise runs`) read while the search keeps appending.
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise UserError(f"{db_path}: this file system cannot hold a SQLite WAL journal")
    # FULL, not NORMAL: in WAL mode NORMAL survives a killed process but may lose the last
    # commits on power loss. An append is one per evaluation, which costs far more than the
    # fsync, and "durable when append returns" is the promise resume depends on.
    conn.execute("PRAGMA synchronous = FULL")


def _read_meta(conn: sqlite3.Connection, db_path: Path) -> RunMeta:
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{db_path}: not a loopwise run database ({exc})") from None
    missing = [key for key in _META_KEYS if key not in rows]
    if missing:
        raise UserError(f"{db_path}: run meta lacks {', '.join(missing)}")
    return RunMeta(
        run_id=rows["run_id"],
        kind=rows["kind"],
        created=float(rows["created"]),
        loopwise_version=rows["loopwise_version"],
        config_text=rows["config_text"],
    )


def _check_schema(conn: sqlite3.Connection, db_path: Path) -> None:
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{db_path}: not a loopwise run database ({exc})") from None
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{db_path}: written by a newer loopwise (store schema {version}; this version "
            f"reads up to {SCHEMA_VERSION}); upgrade loopwise to open it"
        )
    if version < 1:
        raise UserError(f"{db_path}: not a loopwise run database (no store schema version)")


def _write_new_db(db_path: Path, meta: RunMeta) -> None:
    conn = _connect(db_path, "rwc")
    try:
        _configure_for_writing(conn, db_path)
        conn.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [(key, str(getattr(meta, key))) for key in _META_KEYS],
        )
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    finally:
        conn.close()


def _claim_run_dir(runs_dir: Path, run_id: str | None, now: float) -> Path:
    """Creates the run's directory; mkdir is atomic, so two creators never share an id."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(8 if run_id is None else 1):
        run_dir = runs_dir / (run_id or new_run_id(now))
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    if run_id is not None:
        raise UserError(f"run {run_id!r} already exists at {runs_dir / run_id}")
    raise UserError(f"could not pick a new run id in {runs_dir}; too many runs this second")


class SqliteRunStore(RunStore):
    """Keeps one run in ``<runs_dir>/<run_id>/``: ``run.sqlite`` and ``artifacts/``.

    Every append is committed and fsynced before it returns, so a run killed at any moment is
    resumed with ``SqliteRunStore.open`` and has lost nothing that was recorded. Other processes
    may open the same run and read while it is written. Build one with ``create`` or ``open``.
    """

    def __init__(self, run_dir: Path, conn: sqlite3.Connection, meta: RunMeta) -> None:
        self._run_dir = run_dir
        self._conn: sqlite3.Connection | None = conn
        self._meta = meta
        self._files = ArtifactFiles(run_dir / ARTIFACTS_DIR)
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls,
        runs_dir: str | os.PathLike[str],
        kind: str,
        config_text: str,
        run_id: str | None = None,
    ) -> SqliteRunStore:
        """Creates a new run under ``runs_dir`` and opens it.

        Args:
            runs_dir: directory holding one subdirectory per run; created if missing.
            kind: what the run does, e.g. ``kernels.search``.
            config_text: the resolved configuration as YAML or JSON text.
            run_id: an explicit id; by default ``YYYYMMDD-HHMMSS-<6 hex>`` (UTC).

        Raises:
            UserError: ``run_id`` is not a safe name or is already taken.
        """
        now = time.time()
        wanted = None if run_id is None else check_run_id(run_id)
        run_dir = _claim_run_dir(Path(runs_dir), wanted, now)
        meta = RunMeta(run_dir.name, kind, now, __version__, config_text)
        (run_dir / ARTIFACTS_DIR).mkdir()
        # Built under another name and renamed, so a crash here never leaves a half-made run
        # that `open` would take for a real one.
        with replacing(run_dir / DB_NAME, durable=True) as building:
            _write_new_db(building, meta)
        fsync_dir(run_dir.parent)  # the run directory's own entry
        return cls.open(runs_dir, run_dir.name)

    @classmethod
    def open(cls, runs_dir: str | os.PathLike[str], run_id: str) -> SqliteRunStore:
        """Opens an existing run to resume it or read it.

        Raises:
            UserError: no run ``run_id`` under ``runs_dir``, or one this version cannot read.
        """
        run_dir = Path(runs_dir) / check_run_id(run_id)
        db_path = run_dir / DB_NAME
        if not db_path.is_file():
            raise UserError(f"no run {run_id!r} at {run_dir}")
        conn = _connect(db_path, "rw")
        try:
            _check_schema(conn, db_path)
            _configure_for_writing(conn, db_path)
            meta = _read_meta(conn, db_path)
        except BaseException:
            conn.close()
            raise
        return cls(run_dir, conn, meta)

    @property
    def meta(self) -> RunMeta:
        return self._meta

    @property
    def run_dir(self) -> Path:
        """The run's directory, ``<runs_dir>/<run_id>``."""
        return self._run_dir

    def append(self, kind: str, payload: Mapping[str, Any], key: str | None = None) -> int:
        check_event_fields(kind, key)
        text = encode_payload(payload)
        with self._lock:
            cursor = self._connection().execute(
                "INSERT INTO events (ts, kind, key, payload) VALUES (?, ?, ?, ?)",
                (time.time(), kind, key, text),
            )
            return int(cursor.lastrowid)

    def events(self, kind: str | None = None, after_seq: int = 0) -> Iterator[Event]:
        with self._lock:
            row = self._connection().execute("SELECT COALESCE(MAX(seq), 0) FROM events")
            upto = row.fetchone()[0]  # the snapshot bound, taken now rather than at first next()
        return self._iter_events(kind, after_seq, upto)

    def _iter_events(self, kind: str | None, after_seq: int, upto: int) -> Iterator[Event]:
        where = "seq > ? AND seq <= ?" + ("" if kind is None else " AND kind = ?")
        query = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq LIMIT {_BATCH}"
        while True:
            params = (after_seq, upto) if kind is None else (after_seq, upto, kind)
            with self._lock:
                rows = self._connection().execute(query, params).fetchall()
            for row in rows:
                yield _event(row)
            if len(rows) < _BATCH:
                return
            after_seq = rows[-1][0]

    def latest_by_key(self, kind: str) -> dict[str, Event]:
        query = f"""SELECT {_EVENT_COLUMNS} FROM events WHERE seq IN (
            SELECT MAX(seq) FROM events WHERE kind = ? AND key IS NOT NULL GROUP BY key
        ) ORDER BY seq"""
        with self._lock:
            rows = self._connection().execute(query, (kind,)).fetchall()
        return {row[3]: _event(row) for row in rows}

    def put_artifact(
        self, data: bytes | str, *, name: str, media_type: str | None = None
    ) -> str:
        raw, media_type = artifact_bytes(data, media_type)
        sha = sha256_hex(raw)
        with self._lock:
            conn = self._connection()
            # The file first: a crash between the two leaves an unlisted file, never a row
            # that points at nothing.
            self._files.write(sha, raw)
            conn.execute(
                "INSERT OR IGNORE INTO artifacts VALUES (?, ?, ?, ?, ?)",
                (sha, name, media_type, len(raw), time.time()),
            )
        return sha

    def get_artifact(self, sha256: str) -> bytes:
        sha = check_sha(sha256)
        with self._lock:
            conn = self._connection()
            known = conn.execute("SELECT 1 FROM artifacts WHERE sha256 = ?", (sha,)).fetchone()
        if known is None:
            raise ArtifactError(f"no artifact {sha} in run {self._meta.run_id}")
        return self._files.read(sha)

    def artifacts(self) -> list[ArtifactInfo]:
        query = "SELECT sha256, name, media_type, size, created FROM artifacts"
        with self._lock:
            rows = self._connection().execute(query + " ORDER BY created, sha256").fetchall()
        return [ArtifactInfo(*row) for row in rows]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"run store for {self._meta.run_id} is closed")
        return self._conn


def _event(row: tuple) -> Event:
    seq, ts, kind, key, payload = row
    return Event(seq, ts, kind, key, decode_payload(payload))


def list_runs(runs_dir: str | os.PathLike[str]) -> list[RunMeta]:
    """The runs under ``runs_dir``, oldest first; an empty list if it does not exist.

    Raises:
        UserError: a run's database cannot be read.
    """
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    found = []
    for run_dir in root.iterdir():
        db_path = run_dir / DB_NAME
        if run_dir.name.startswith(".") or not db_path.is_file():
            continue  # not a run, or one whose creation never finished
        conn = _connect(db_path, "ro")
        try:
            found.append(_read_meta(conn, db_path))
        finally:
            conn.close()
    return sorted(found, key=lambda meta: (meta.created, meta.run_id))
