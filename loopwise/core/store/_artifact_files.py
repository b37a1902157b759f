"""Content-addressed artifact files, ``<root>/<first 2 hex>/<sha256>``, written atomically."""

from __future__ import annotations

from pathlib import Path

from loopwise.core.files import fsync_dir, write_atomic
from loopwise.core.store._records import ArtifactError, sha256_hex


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
        write_atomic(target, data, durable=True)

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
