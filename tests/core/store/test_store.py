"""Run stores from the user's side: conformance, resume after a crash, WAL reads, artifacts."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import loopwise
from loopwise.core.store import (
    SCHEMA_VERSION,
    ArtifactError,
    InMemoryRunStore,
    SqliteRunStore,
    list_runs,
)
from loopwise.core.store.conformance import RunStoreConformance
from loopwise.errors import UserError

_REPO_ROOT = str(Path(loopwise.__file__).resolve().parents[1])


class TestSqliteRunStore(RunStoreConformance):
    def make_store(self, tmp_path, kind, config_text):
        return SqliteRunStore.create(tmp_path / "runs", kind, config_text)


class TestInMemoryRunStore(RunStoreConformance):
    def make_store(self, tmp_path, kind, config_text):
        return InMemoryRunStore(kind, config_text)


def _one_line_user_error(call) -> str:
    with pytest.raises(UserError) as caught:
        call()
    message = str(caught.value)
    assert message and "\n" not in message, message
    return message


def _db(store: SqliteRunStore) -> Path:
    return store.run_dir / "run.sqlite"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def test_create_lays_out_one_directory_per_run(runs: Path) -> None:
    with SqliteRunStore.create(runs, "kernels.eval", "a: 1\n") as store:
        run_dir = runs / store.meta.run_id
        assert store.run_dir == run_dir
        assert (run_dir / "run.sqlite").is_file() and (run_dir / "artifacts").is_dir()
        conn = sqlite3.connect(_db(store))
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        conn.close()
    assert sorted(p.name for p in run_dir.iterdir()) == ["artifacts", "run.sqlite"]


def test_reopen_by_id_resumes_everything(runs: Path) -> None:
    store = SqliteRunStore.create(runs, "kernels.search", "search: {beam: 4}\n")
    store.append("kernels.eval", {"status": "correct", "speedup": 1.5}, key="c1")
    store.append("kernels.eval", {"status": "timeout"}, key="c2")
    sha = store.put_artifact("def kernel(): pass\n", name="c1.py")
    meta, events = store.meta, list(store.events())
    store.close()

    resumed = SqliteRunStore.open(runs, meta.run_id)
    assert resumed.meta == meta
    assert list(resumed.events()) == events
    assert set(resumed.latest_by_key("kernels.eval")) == {"c1", "c2"}
    assert resumed.get_artifact(sha) == b"def kernel(): pass\n"
    assert resumed.append("kernels.eval", {"status": "correct"}, key="c3") == 3
    resumed.close()


def test_explicit_run_id_is_used_once(runs: Path) -> None:
    SqliteRunStore.create(runs, "kernels.eval", "", run_id="nightly-1").close()
    assert SqliteRunStore.open(runs, "nightly-1").meta.run_id == "nightly-1"
    message = _one_line_user_error(
        lambda: SqliteRunStore.create(runs, "kernels.eval", "", run_id="nightly-1")
    )
    assert "already exists" in message


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", ".hidden"])
def test_unsafe_run_id_is_a_user_error(runs: Path, bad: str) -> None:
    _one_line_user_error(lambda: SqliteRunStore.create(runs, "k", "", run_id=bad))
    _one_line_user_error(lambda: SqliteRunStore.open(runs, bad))
    assert not (runs.parent / "escape").exists()


def test_open_unknown_run_names_only_the_path_looked_at(runs: Path) -> None:
    SqliteRunStore.create(runs, "k", "").close()
    message = _one_line_user_error(lambda: SqliteRunStore.open(runs, "20000101-000000-abcdef"))
    assert message == f"no run '20000101-000000-abcdef' at {runs / '20000101-000000-abcdef'}"


def test_newer_schema_is_a_one_line_user_error(runs: Path) -> None:
    store = SqliteRunStore.create(runs, "k", "")
    store.close()
    conn = sqlite3.connect(_db(store))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    message = _one_line_user_error(lambda: SqliteRunStore.open(runs, store.meta.run_id))
    assert "newer loopwise" in message and str(_db(store)) in message
    assert [m.run_id for m in list_runs(runs)] == [store.meta.run_id]


def test_foreign_files_are_user_errors(runs: Path) -> None:
    (runs / "plain").mkdir(parents=True)
    sqlite3.connect(runs / "plain" / "run.sqlite").execute("CREATE TABLE t (x)").connection.close()
    assert "not a loopwise run" in _one_line_user_error(lambda: SqliteRunStore.open(runs, "plain"))
    (runs / "junk").mkdir()
    (runs / "junk" / "run.sqlite").write_bytes(b"this is not a database" * 100)
    assert "not a loopwise run" in _one_line_user_error(lambda: SqliteRunStore.open(runs, "junk"))


def test_events_cannot_be_updated_or_deleted(runs: Path) -> None:
    with SqliteRunStore.create(runs, "k", "") as store:
        store.append("kernels.eval", {"speedup": 1.1}, key="c1")
        conn = sqlite3.connect(_db(store), isolation_level=None)
        for statement in [
            "UPDATE events SET payload = '{\"speedup\": 9.9}'",
            "DELETE FROM events",
            "UPDATE meta SET value = 'other' WHERE key = 'kind'",
        ]:
            with pytest.raises(sqlite3.IntegrityError, match="append-only|fixed at creation"):
                conn.execute(statement)
        conn.close()
        assert [e.payload for e in store.events()] == [{"speedup": 1.1}]
        assert store.meta.kind == "k"


def test_reader_sees_commits_while_writer_writes(runs: Path) -> None:
    writer = SqliteRunStore.create(runs, "k", "")
    reader = SqliteRunStore.open(runs, writer.meta.run_id)
    for i in range(1, 6):
        writer.append("step", {"i": i})
        assert [e.seq for e in reader.events()] == list(range(1, i + 1))
    # An open read transaction must not block the writer (it would, without WAL).
    snapshot = sqlite3.connect(_db(writer), isolation_level=None, timeout=0.2)
    snapshot.execute("BEGIN")
    assert snapshot.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 5
    assert writer.append("step", {"i": 6}) == 6
    assert snapshot.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 5
    snapshot.execute("COMMIT")
    assert snapshot.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 6
    snapshot.close()
    writer.close()
    reader.close()


def test_artifact_file_is_content_addressed_and_verified(runs: Path) -> None:
    with SqliteRunStore.create(runs, "k", "") as store:
        sha = store.put_artifact(b"original bytes", name="a.bin")
        path = store.run_dir / "artifacts" / sha[:2] / sha
        assert path.read_bytes() == b"original bytes"
        assert store.put_artifact(b"original bytes", name="again.bin") == sha
        assert [p.name for p in path.parent.iterdir()] == [sha]  # no copies, no temp files

        path.write_bytes(b"tampered bytes")
        message = _one_line_user_error(lambda: store.get_artifact(sha))
        assert "corrupt" in message and str(path) in message
        with pytest.raises(ArtifactError):
            store.get_artifact(sha)

        store.put_artifact(b"original bytes", name="a.bin")  # putting it again repairs it
        assert store.get_artifact(sha) == b"original bytes"
        path.unlink()
        assert "missing" in _one_line_user_error(lambda: store.get_artifact(sha))


def test_list_runs_reports_kind_and_creation(runs: Path) -> None:
    assert list_runs(runs) == []
    first = SqliteRunStore.create(runs, "kernels.eval", "", run_id="b-first")
    second = SqliteRunStore.create(runs, "kernels.search", "", run_id="a-second")
    (runs / "not-a-run").mkdir()
    (runs / "notes.txt").write_text("hello")
    listed = list_runs(runs)
    assert [(m.run_id, m.kind) for m in listed] == [
        ("b-first", "kernels.eval"),
        ("a-second", "kernels.search"),
    ]
    assert listed[0].created == first.meta.created
    first.close()
    second.close()


def test_importing_the_store_stays_cheap() -> None:
    code = "import sys, loopwise.core.store; print(sorted({'torch', 'pytest'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_child_env(), check=True
    )
    assert done.stdout.strip() == "[]"


_WRITER = """
import sys
from loopwise.core.store import SqliteRunStore
store = SqliteRunStore.open(sys.argv[1], sys.argv[2])
i = 0
while True:
    sha = store.put_artifact(f"source {i}", name=f"c{i}.py") if i % 5 == 0 else None
    seq = store.append("kernels.eval", {"i": i, "sha": sha, "pad": "x" * 300}, key=f"c{i % 7}")
    print(seq, flush=True)
    i += 1
"""


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO_ROOT, env.get("PYTHONPATH")]))
    return env


def _read_seq(child: subprocess.Popen) -> int:
    line = child.stdout.readline()
    if not line:
        child.kill()
        pytest.fail(f"writer died early: {child.stderr.read()}")
    return int(line)


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
def test_sigkill_mid_stream_loses_no_returned_append(runs: Path) -> None:
    run_id = SqliteRunStore.create(runs, "kernels.search", "").meta.run_id
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(runs), run_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(),
    )
    try:
        acknowledged = [_read_seq(child) for _ in range(30)]
        with SqliteRunStore.open(runs, run_id) as reader:  # a second process, mid-write
            seen = {e.seq for e in reader.events()}
        assert set(acknowledged) <= seen
        acknowledged += [_read_seq(child) for _ in range(10)]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        rest, _ = child.communicate(timeout=10)
    assert child.returncode == -signal.SIGKILL
    acknowledged += [int(line) for line in rest.splitlines(keepends=True) if line.endswith("\n")]

    with SqliteRunStore.open(runs, run_id) as store:
        events = list(store.events())
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1))
        assert set(acknowledged) <= set(seqs), "an append that returned was lost"
        for event in events:
            if event.payload["sha"]:
                expected = f"source {event.payload['i']}".encode()
                assert store.get_artifact(event.payload["sha"]) == expected
        assert store.append("resume", {}) == len(seqs) + 1
        conn = sqlite3.connect(_db(store))
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.close()
