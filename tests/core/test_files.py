"""Whole-or-nothing file writes: a reader sees the old file or all of the new one, never a part."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from loopwise.core.files import replacing, write_atomic


def test_write_creates_the_folder_and_writes_text_or_bytes(tmp_path):
    target = tmp_path / "a" / "b" / "out.json"
    write_atomic(target, '{"x": 1}')
    assert target.read_text(encoding="utf-8") == '{"x": 1}'
    write_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]  # no temporary file left


def test_text_is_utf8_whatever_the_locale(tmp_path):
    target = tmp_path / "t.md"
    write_atomic(target, "µs — ≥ 1.3x")
    assert target.read_bytes() == "µs — ≥ 1.3x".encode("utf-8")


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "ckpt.pt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with replacing(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crashed while writing")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_a_writer_that_writes_nothing_leaves_the_old_file(tmp_path):
    target = tmp_path / "x.txt"
    target.write_text("old")
    with pytest.raises(FileNotFoundError):
        with replacing(target):
            pass  # never created the temporary file: nothing to rename
    assert target.read_text() == "old"


def test_the_temporary_is_in_the_same_folder_and_unique(tmp_path):
    target = tmp_path / "db.sqlite"
    with replacing(target) as first, replacing(target) as second:
        assert first.parent == second.parent == tmp_path
        assert first != second and first != target
        first.write_text("1")
        second.write_text("2")
    assert target.read_text() == "1"  # the outer one is renamed last, and wins whole


def test_concurrent_writers_never_tear_a_file(tmp_path):
    target = tmp_path / "shared.txt"
    payloads = [str(i) * 200_000 for i in range(8)]
    seen: list[str] = []
    stop = threading.Event()

    def read():
        while not stop.is_set():
            if target.exists():
                seen.append(target.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write_atomic, args=(target, p)) for p in payloads]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert target.read_text() in payloads
    assert all(text in payloads for text in seen)
    assert [p.name for p in tmp_path.iterdir()] == ["shared.txt"]


def test_durable_write_fsyncs(tmp_path, monkeypatch):
    import os

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    write_atomic(tmp_path / "a", "x", durable=True)
    assert len(synced) >= 1
    synced.clear()
    write_atomic(tmp_path / "b", "x")
    assert synced == []


def test_path_like_targets(tmp_path):
    write_atomic(str(tmp_path / "s.txt"), "ok")
    assert Path(tmp_path / "s.txt").read_text() == "ok"
