"""Content-addressed artifact files, ``<root>/<first 2 hex>/<sha256>``, written atomically."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from loopwise.core.store._records import ArtifactError, sha256_hex

# Windows needs O_BINARY or it rewrites newlines; elsewhere the flag does not exist.
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)


def fsync_dir(path: Path) -> None:
    """Makes a rename or a new entry in ``path`` survive power loss, where the OS allows it."""
    if os.name != "posix":
        return  # directories cannot be opened for fsync on Windows; NTFS journals renames
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(target: Path, data: bytes) -> None:
    """Writes ``data`` to ``target`` so that readers see the old file or all of the new one.

    The temporary file sits in the same directory, so ``os.replace`` is a rename within one
    file system (atomic); it is fsynced first, so the rename can never expose a short file.
    """
    temp = target.with_name(f".tmp-{target.name[:16]}-{secrets.token_hex(4)}")
    fd = os.open(temp, _WRITE_FLAGS, 0o666)  # 0o666 minus umask, like a plain open()
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


class ArtifactFiles:
    """The artifact files of one run.

    Args:
        root: the run's ``artifacts/`` directory; created if missing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, sha: str) -> Path:
        """Where the content with digest ``sha`` (already checked) lives."""
        return self.root / sha[:2] / sha

    def write(self, sha: str, data: bytes) -> None:
        """Stores ``data`` under ``sha`` unless an intact copy is already there.

        A damaged copy is replaced, so putting the same content again repairs it.
        """
        target = self.path(sha)
        if self._is_intact(target, sha):
            return
        if not target.parent.is_dir():
            target.parent.mkdir(exist_ok=True)
            fsync_dir(self.root)  # the new shard directory must itself survive a power loss
        write_atomic(target, data)

    def read(self, sha: str) -> bytes:
        """The content stored under ``sha``, after checking that it still hashes to ``sha``."""
        target = self.path(sha)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"artifact {sha} is missing: no file {target}") from None
        actual = sha256_hex(data)
        if actual != sha:
            raise ArtifactError(
                f"artifact {sha} is corrupt: {target} now hashes to {actual} "
                f"({len(data)} bytes); it was changed or damaged on disk"
            )
        return data

    @staticmethod
    def _is_intact(target: Path, sha: str) -> bool:
        try:
            return sha256_hex(target.read_bytes()) == sha
        except FileNotFoundError:
            return False
