"""A run store that lives in memory only: the same contract as SQLite, without durability."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from loopwise import __version__
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


class InMemoryRunStore(RunStore):
    """Keeps a run in memory, for dry runs and tests; everything is lost when the process ends.

    Payloads are kept as JSON text, as on disk, so a caller that changes a dict after appending
    it (or changes an event it read) cannot change what was recorded.

    Args:
        kind: what the run does, e.g. ``kernels.eval``.
        config_text: the resolved configuration as YAML or JSON text.
        run_id: an explicit id; by default a new sortable one.
    """

    def __init__(self, kind: str, config_text: str, run_id: str | None = None) -> None:
        now = time.time()
        self._meta = RunMeta(
            run_id=check_run_id(run_id) if run_id is not None else new_run_id(now),
            kind=kind,
            created=now,
            loopwise_version=__version__,
            config_text=config_text,
        )
        self._events: list[tuple[float, str, str | None, str]] = []
        self._blobs: dict[str, tuple[bytes, ArtifactInfo]] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def meta(self) -> RunMeta:
        return self._meta

    def append(self, kind: str, payload: Mapping[str, Any], key: str | None = None) -> int:
        check_event_fields(kind, key)
        text = encode_payload(payload)
        with self._lock:
            self._check_open()
            self._events.append((time.time(), kind, key, text))
            return len(self._events)

    def events(self, kind: str | None = None, after_seq: int = 0) -> Iterator[Event]:
        with self._lock:
            self._check_open()
            upto = len(self._events)  # the snapshot bound, taken now rather than at first next()
        return self._iter_events(kind, max(after_seq, 0), upto)

    def _iter_events(self, kind: str | None, after_seq: int, upto: int) -> Iterator[Event]:
        for index in range(after_seq, upto):
            ts, event_kind, key, text = self._events[index]
            if kind is None or event_kind == kind:
                yield Event(index + 1, ts, event_kind, key, decode_payload(text))

    def put_artifact(
        self, data: bytes | str, *, name: str, media_type: str | None = None
    ) -> str:
        raw, media_type = artifact_bytes(data, media_type)
        sha = sha256_hex(raw)
        with self._lock:
            self._check_open()
            if sha not in self._blobs:
                info = ArtifactInfo(sha, name, media_type, len(raw), time.time())
                self._blobs[sha] = (raw, info)
        return sha

    def get_artifact(self, sha256: str) -> bytes:
        sha = check_sha(sha256)
        with self._lock:
            self._check_open()
            stored = self._blobs.get(sha)
        if stored is None:
            raise ArtifactError(f"no artifact {sha} in run {self._meta.run_id}")
        return stored[0]

    def artifacts(self) -> list[ArtifactInfo]:
        with self._lock:
            self._check_open()
            return [info for _, info in self._blobs.values()]

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"run store for {self._meta.run_id} is closed")
