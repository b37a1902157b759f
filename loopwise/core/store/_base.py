"""The abstract run store: one run's meta, append-only event log and content-addressed artifacts."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, Self

from loopwise.core.store._records import ArtifactInfo, Event, RunMeta


class RunStore(abc.ABC):
    """Keeps one run: its meta, an append-only event log, and content-addressed artifacts.

    A run is resumed by replaying its events: ``latest_by_key`` tells a search which work is
    already done. Algorithms take frozen records from the store, never the store itself.
    Every implementation must pass ``loopwise.core.store.conformance.RunStoreConformance``.
    """

    @property
    @abc.abstractmethod
    def meta(self) -> RunMeta:
        """What the run is: id, kind, creation time, loopwise version and resolved config."""

    @abc.abstractmethod
    def append(self, kind: str, payload: Mapping[str, Any], key: str | None = None) -> int:
        """Records one event; it is committed (durable, where the store is) when this returns.

        Args:
            kind: what happened, e.g. ``kernels.eval``.
            payload: a JSON object; NaN and Infinity are rejected.
            key: what it happened to (e.g. a candidate's content key), for ``latest_by_key``.

        Returns:
            The event's sequence number: 1 for the first event, then strictly increasing.

        Raises:
            TypeError: the payload is not a mapping or holds values JSON cannot encode.
            ValueError: the kind is empty or the payload holds NaN or Infinity.
            RuntimeError: the store is closed.
        """

    @abc.abstractmethod
    def events(self, kind: str | None = None, after_seq: int = 0) -> Iterator[Event]:
        """Events in ``seq`` order, as they stood when this was called.

        Args:
            kind: only events of this kind; None for all.
            after_seq: only events with ``seq`` greater than this.
        """

    def latest_by_key(self, kind: str) -> dict[str, Event]:
        """The last event of ``kind`` for each key, ordered by that event's ``seq``.

        Events without a key are left out. This is what a resumed run uses to skip work.
        """
        latest: dict[str, Event] = {}
        for event in self.events(kind):
            if event.key is not None:
                latest.pop(event.key, None)  # re-insert so the order follows the latest seq
                latest[event.key] = event
        return latest

    @abc.abstractmethod
    def put_artifact(
        self, data: bytes | str, *, name: str, media_type: str | None = None
    ) -> str:
        """Stores content once, however often it is put, and returns its sha256 hex digest.

        Args:
            data: the content; text is stored as UTF-8.
            name: a name for people; when the content is already stored, the first name stays.
            media_type: defaults to ``text/plain; charset=utf-8`` for text and
                ``application/octet-stream`` for bytes.
        """

    @abc.abstractmethod
    def get_artifact(self, sha256: str) -> bytes:
        """The content stored under ``sha256``, verified against it.

        Raises:
            ArtifactError: the digest is malformed, unknown, or the stored content is corrupt.
        """

    @abc.abstractmethod
    def artifacts(self) -> list[ArtifactInfo]:
        """Every stored artifact, oldest first."""

    @abc.abstractmethod
    def close(self) -> None:
        """Releases the store; later writes raise ``RuntimeError``. Closing twice is harmless."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
