"""The records a run store keeps (events, run meta, artifact info) and how they are identified.

Both store implementations encode payloads and name runs and artifacts through the functions here,
so an in-memory dry run and a durable SQLite run accept and reject exactly the same inputs.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loopwise.errors import UserError

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ArtifactError(UserError):
    """An artifact that cannot be returned: unknown, missing on disk, or corrupt."""


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's append-only event log.

    Attributes:
        seq: position in the log; starts at 1, strictly increasing, never reused.
        ts: wall-clock time of the append, in seconds since the epoch.
        kind: what happened, dotted, e.g. ``kernels.eval``.
        key: what it happened to (e.g. a candidate's content key), or None.
        payload: the JSON object that was recorded; every read returns a fresh copy.
    """

    seq: int
    ts: float
    kind: str
    key: str | None
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunMeta:
    """What a run is, fixed when it is created.

    Attributes:
        run_id: the run's id, e.g. ``20261129-191530-ab12cd`` (UTC time, then random hex).
        kind: what the run does, e.g. ``kernels.search`` or ``kernels.eval``.
        created: creation time, in seconds since the epoch.
        loopwise_version: the loopwise version that created the run.
        config_text: the resolved configuration (YAML or JSON text), so the run can be repeated.
    """

    run_id: str
    kind: str
    created: float
    loopwise_version: str
    config_text: str


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """One stored artifact. Content is addressed by ``sha256``; the first name given is kept.

    Attributes:
        sha256: hex digest of the content.
        name: a name for people, e.g. ``candidate.py``.
        media_type: e.g. ``text/x-python`` or ``application/octet-stream``.
        size: content length in bytes.
        created: time it was first stored, in seconds since the epoch.
    """

    sha256: str
    name: str
    media_type: str
    size: int
    created: float


def new_run_id(now: float) -> str:
    """A short id that sorts by creation time: ``YYYYMMDD-HHMMSS-<6 hex>`` in UTC."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    """Returns ``run_id`` if it is safe as a directory name, else raises ``UserError``."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise UserError(
            f"{run_id!r} is not a run id: use letters, digits, '.', '_' or '-' (at most 100)"
        )
    return run_id


def check_event_fields(kind: str, key: str | None) -> None:
    """Rejects an event kind or key that could not be queried back reliably."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"event kind must be a non-empty string, got {kind!r}")
    if key is not None and not isinstance(key, str):
        raise TypeError(f"event key must be a string or None, got {type(key).__name__}")


def finite(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples) with every NaN or infinite float replaced by None:
    what :func:`encode_payload` accepts, a value that overflowed stored as missing."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def encode_payload(payload: Mapping[str, Any]) -> str:
    """Encodes a payload as strict JSON text (no NaN or Infinity, which other readers reject)."""
    if not isinstance(payload, Mapping):
        raise TypeError(f"event payload must be a mapping, got {type(payload).__name__}")
    try:
        return json.dumps(dict(payload), allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except ValueError as exc:
        raise ValueError(f"event payload is not strict JSON: {exc}") from exc


def decode_payload(text: str) -> dict[str, Any]:
    """Decodes payload text written by :func:`encode_payload`."""
    return json.loads(text)


def artifact_bytes(data: bytes | str, media_type: str | None) -> tuple[bytes, str]:
    """Returns the bytes to store (text as UTF-8) and the media type, defaulted by data type."""
    if isinstance(data, str):
        return data.encode("utf-8"), media_type or "text/plain; charset=utf-8"
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), media_type or "application/octet-stream"
    raise TypeError(f"artifact data must be bytes or str, got {type(data).__name__}")


def sha256_hex(data: bytes) -> str:
    """The content address of ``data``."""
    return hashlib.sha256(data).hexdigest()


def check_sha(sha256: str) -> str:
    """Returns the digest in lower case, or raises ``ArtifactError`` if it is not one.

    Artifact files are named by digest, so this also keeps a caller's string out of file paths.
    """
    normal = sha256.lower() if isinstance(sha256, str) else ""
    if not _SHA256.fullmatch(normal):
        raise ArtifactError(f"{sha256!r} is not a sha256 hex digest (64 hex characters)")
    return normal
