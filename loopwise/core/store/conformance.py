"""The tests every run store must pass. Needs pytest, so it is not imported by the package.

Use it by subclassing in a test module::

    class TestMyStore(RunStoreConformance):
        def make_store(self, tmp_path, kind, config_text):
            return MyStore.create(tmp_path / "runs", kind, config_text)
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopwise import __version__
from loopwise.core.store._base import RunStore
from loopwise.core.store._records import ArtifactError
from loopwise.errors import UserError

_PAYLOAD = {
    "status": "correct",
    "speedup": 1.375,
    "tiny": 1e-300,
    "big": 2**53 + 1,
    "ok": True,
    "missing": None,
    "text": "µs ✓ \"quoted\"\nsecond line",
    "nested": {"tile": [64, 128], "empty": {}, "list": []},
}


class RunStoreConformance:
    """Behaviour shared by every ``RunStore``; subclass it and implement ``make_store``."""

    KIND = "conformance.eval"
    CONFIG_TEXT = "kernels:\n  eval:\n    perf_trials: 50\n"

    def make_store(self, tmp_path: Path, kind: str, config_text: str) -> RunStore:
        """Returns a new, empty store for a run of ``kind`` with ``config_text``."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[RunStore]:
        store = self.make_store(tmp_path, self.KIND, self.CONFIG_TEXT)
        yield store
        store.close()

    def test_meta_describes_the_run(self, store: RunStore) -> None:
        meta = store.meta
        assert meta.kind == self.KIND
        assert meta.config_text == self.CONFIG_TEXT
        assert meta.loopwise_version == __version__
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", meta.run_id), meta.run_id
        assert abs(meta.created - time.time()) < 60
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(meta.created))
        assert meta.run_id.startswith(stamp), (meta.run_id, stamp)

    def test_new_store_is_empty(self, store: RunStore) -> None:
        assert list(store.events()) == []
        assert store.latest_by_key(self.KIND) == {}
        assert store.artifacts() == []

    def test_append_numbers_events_from_one(self, store: RunStore) -> None:
        seqs = [store.append("a", {"i": i}) for i in range(5)]
        assert seqs == [1, 2, 3, 4, 5]

    def test_events_round_trip_exactly(self, store: RunStore) -> None:
        before = time.time()
        store.append("kernels.eval", _PAYLOAD, key="cand-1")
        store.append("search.step", {})
        first, second = store.events()
        assert (first.seq, first.kind, first.key, first.payload) == (
            1, "kernels.eval", "cand-1", _PAYLOAD
        )
        assert (second.seq, second.kind, second.key, second.payload) == (2, "search.step", None, {})
        assert before - 1 <= first.ts <= time.time() + 1

    def test_events_filter_by_kind_and_after_seq(self, store: RunStore) -> None:
        for i, kind in enumerate(["a", "b", "a", "b", "a"]):
            store.append(kind, {"i": i})
        assert [e.seq for e in store.events(kind="a")] == [1, 3, 5]
        assert [e.seq for e in store.events(after_seq=3)] == [4, 5]
        assert [e.seq for e in store.events(kind="b", after_seq=2)] == [4]
        assert list(store.events(kind="absent")) == []

    def test_events_reads_a_long_log(self, store: RunStore) -> None:
        for i in range(700):
            store.append("other" if i % 7 == 0 else "bulk", {"i": i})
        assert [e.payload["i"] for e in store.events()] == list(range(700))
        bulk = [e.payload["i"] for e in store.events(kind="bulk", after_seq=7)]
        assert bulk == [i for i in range(7, 700) if i % 7]

    def test_events_is_a_snapshot_from_the_call(self, store: RunStore) -> None:
        store.append("a", {"i": 0})
        pending = store.events()
        store.append("a", {"i": 1})
        assert [e.seq for e in pending] == [1]

    def test_payload_is_copied_in_and_out(self, store: RunStore) -> None:
        payload = {"nested": {"x": 1}}
        store.append("a", payload)
        payload["nested"]["x"] = 2
        read = next(store.events())
        read.payload["nested"]["x"] = 3
        assert next(store.events()).payload == {"nested": {"x": 1}}

    def test_event_is_frozen(self, store: RunStore) -> None:
        store.append("a", {})
        event = next(store.events())
        with pytest.raises(AttributeError):
            event.kind = "b"  # type: ignore[misc]

    @pytest.mark.parametrize(
        ("payload", "error"),
        [
            ({"x": object()}, TypeError),
            ([("x", 1)], TypeError),
            ({"x": float("nan")}, ValueError),
            ({"x": float("inf")}, ValueError),
        ],
    )
    def test_rejected_payload_records_nothing(
        self, store: RunStore, payload: object, error: type[Exception]
    ) -> None:
        with pytest.raises(error):
            store.append("a", payload)  # type: ignore[arg-type]
        assert list(store.events()) == []
        assert store.append("a", {"ok": True}) == 1

    def test_rejects_empty_kind_and_non_string_key(self, store: RunStore) -> None:
        with pytest.raises(ValueError):
            store.append("", {})
        with pytest.raises(TypeError):
            store.append("a", {}, key=7)  # type: ignore[arg-type]
        assert list(store.events()) == []

    def test_latest_by_key_keeps_the_last_event_per_key(self, store: RunStore) -> None:
        store.append("eval", {"v": 1}, key="a")
        store.append("eval", {"v": 1}, key="b")
        store.append("other", {"v": 9}, key="a")
        store.append("eval", {"v": 2}, key="a")
        store.append("eval", {"v": 3})
        latest = store.latest_by_key("eval")
        assert list(latest) == ["b", "a"]
        assert (latest["a"].seq, latest["a"].payload) == (4, {"v": 2})
        assert latest["b"].seq == 2
        assert store.latest_by_key("other")["a"].payload == {"v": 9}

    def test_artifact_is_addressed_by_sha256(self, store: RunStore) -> None:
        data = b"\x00\x01 kernel binary \xff"
        sha = store.put_artifact(data, name="k.cubin")
        assert sha == hashlib.sha256(data).hexdigest()
        assert store.get_artifact(sha) == data
        assert store.get_artifact(sha.upper()) == data

    def test_text_artifact_is_utf8(self, store: RunStore) -> None:
        text = "def kernel():  # µs ✓\n    pass\n"
        sha = store.put_artifact(text, name="cand.py")
        assert store.get_artifact(sha) == text.encode("utf-8")
        (info,) = store.artifacts()
        assert (info.sha256, info.name, info.size) == (sha, "cand.py", len(text.encode()))
        assert info.media_type == "text/plain; charset=utf-8"

    def test_artifact_info_records_given_media_type(self, store: RunStore) -> None:
        sha = store.put_artifact(b"{}", name="r.json", media_type="application/json")
        (info,) = store.artifacts()
        assert (info.sha256, info.media_type, info.size) == (sha, "application/json", 2)
        assert abs(info.created - time.time()) < 60
        store.put_artifact(b"raw", name="r.bin")
        assert store.artifacts()[1].media_type == "application/octet-stream"

    def test_same_content_is_stored_once(self, store: RunStore) -> None:
        first = store.put_artifact("same", name="first.txt")
        second = store.put_artifact(b"same", name="second.txt")
        other = store.put_artifact("different", name="third.txt")
        assert first == second != other
        assert [(a.sha256, a.name) for a in store.artifacts()] == [
            (first, "first.txt"),
            (other, "third.txt"),
        ]

    def test_unknown_artifact_is_a_one_line_error(self, store: RunStore) -> None:
        sha = hashlib.sha256(b"never stored").hexdigest()
        with pytest.raises(ArtifactError) as caught:
            store.get_artifact(sha)
        assert sha in str(caught.value) and "\n" not in str(caught.value)
        assert isinstance(caught.value, UserError)

    @pytest.mark.parametrize("bad", ["../../etc/passwd", "abc", "g" * 64, ""])
    def test_malformed_sha_is_rejected(self, store: RunStore, bad: str) -> None:
        with pytest.raises(ArtifactError):
            store.get_artifact(bad)

    def test_closed_store_refuses_use(self, store: RunStore) -> None:
        store.append("a", {})
        store.close()
        with pytest.raises(RuntimeError):
            store.append("a", {})
        with pytest.raises(RuntimeError):
            store.put_artifact("x", name="x")
        with pytest.raises(RuntimeError):
            list(store.events())
        store.close()

    def test_context_manager_closes(self, tmp_path: Path) -> None:
        with self.make_store(tmp_path, self.KIND, self.CONFIG_TEXT) as store:
            assert store.append("a", {}) == 1
        with pytest.raises(RuntimeError):
            store.append("a", {})
