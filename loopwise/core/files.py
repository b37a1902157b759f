"""Whole-or-nothing file writes: a reader (another process, a resumed run) sees the old file or
all of the new one, and a crash mid-write leaves the old file and no temporary behind.

The new content goes to a temporary file of a unique name in the target's folder, so the final
``os.replace`` is a rename within one file system (atomic), and two writers of one target never
share a temporary. ``durable`` also fsyncs the file before the rename and the folder after it, so
the rename survives power loss where the OS allows (run stores, checkpoints); caches skip it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Makes a rename or a new entry in ``path`` survive power loss, where the OS allows it."""
    if os.name != "posix":
        return  # directories cannot be opened for fsync on Windows; NTFS journals renames
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(target: str | os.PathLike[str], *, durable: bool = False) -> Iterator[Path]:
    """Yields a temporary path for the caller to write ``target``'s new content to (by any means:
    ``torch.save``, SQLite, ``write_text``); on a clean exit it replaces ``target``, on an exception
    it is removed and ``target`` is left as it was. The folder is created if missing.

    Raises:
        FileNotFoundError: the caller wrote nothing to the temporary path.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name[:40]}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        yield temp
        if durable:
            with open(temp, "rb") as file:
                os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(target.parent)


def write_atomic(target: str | os.PathLike[str], data: str | bytes, *, durable: bool = False) -> Path:
    """Writes ``data`` (text as UTF-8) to ``target`` whole or not at all; returns the path."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with replacing(target, durable=durable) as temp:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with os.fdopen(fd, "wb") as file:
            file.write(payload)
    return Path(target)
