"""bench/sweep.sh, the bench spread over device calls: what a call leaves when its limit stops it,
how the next one resumes, and that one sweep measures one frozen commit.

The script runs here against a stand-in repository: a ``.frozen/`` tree whose ``python3 -m
loopwise`` is a stub bench (it names itself, then finishes a "problem" every 0.2 s into its runs
folder, or says which bench it resumes), with the prelude and the row writer stubbed too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

SWEEP = Path(__file__).resolve().parents[3] / "bench" / "sweep.sh"
BENCH_ID = "20261207-000000-abcdef"

STUB_BENCH = f'''
import sys, time, os
argv = sys.argv[1:]
if argv[:2] == ["kernels", "generate"]:
    out = argv[argv.index("--out") + 1]
    os.makedirs(os.path.join(out, "level1"), exist_ok=True)
    with open(os.path.join(out, "level1", "seed%s_count%s.py" % (argv[argv.index("--seed") + 1],
                                                                  argv[argv.index("--count") + 1])), "w") as f:
        f.write("# a problem")
    sys.exit(0)
with open(os.path.join(os.environ["OUT"], "..", "stub.pid"), "w") as f:
    f.write(str(os.getpid()))
runs = argv[argv.index("--runs-dir") + 1]
suite = argv[argv.index("--kernelbench") + 1]
levels = [os.path.join(suite, "level1"), os.path.join(suite, "KernelBench", "level1")]  # a folder, or a checkout
print("suite " + suite + " " + " ".join(sorted(os.listdir(next(p for p in levels if os.path.isdir(p))))), flush=True)
if "--resume" in argv:
    print("resumed " + argv[argv.index("--resume") + 1], flush=True)
else:
    print("bench {BENCH_ID} · 250 problems", flush=True)
records = os.path.join(os.environ["LOOPWISE_CACHE_DIR"], "inductor_records")
print("records " + " ".join(sorted(os.listdir(records)) if os.path.isdir(records) else []), flush=True)
steps = int(os.environ.get("STUB_STEPS", "1000"))
start = len(os.listdir(runs))
for i in range(start, start + steps):
    with open(os.path.join(runs, "p%03d" % i), "w") as f:
        f.write("done")
    os.makedirs(records, exist_ok=True)
    with open(os.path.join(records, os.environ.get("STUB_TRACK", "") + "p%03d.json" % i), "w") as f:
        f.write("{{}}")
    time.sleep(0.2)
'''


def _repo(tmp_path: Path, commit: str = "abc123") -> Path:
    root = tmp_path / "repo"
    frozen = root / ".frozen"
    (frozen / "bench").mkdir(parents=True)
    (frozen / "loopwise").mkdir()
    (frozen / "FROZEN_COMMIT").write_text(commit + "\n")
    (frozen / "bench" / "remote_prelude.sh").write_text(
        'export LOOPWISE_CACHE_DIR=$PWD/.loopwise-cache\nmkdir -p "$OUT" "$LOOPWISE_CACHE_DIR"\n')
    (frozen / "bench" / "bench_rows.py").write_text(
        "import sys, os\nopen(sys.argv[2], 'w').write('problem\\n' + ''.join(p + '\\n' for p in os.listdir(sys.argv[1])))\n")
    (frozen / "loopwise" / "__init__.py").write_text("")
    (frozen / "loopwise" / "__main__.py").write_text(STUB_BENCH)
    (root / "third_party" / "KernelBench" / "KernelBench" / "level1").mkdir(parents=True)
    (root / "third_party" / "KernelBench" / "KernelBench" / "level1" / "1_kb.py").write_text("# a problem")
    return root


def _sweep(root: Path, name: str, *, steps: int = 1000, stop_after: float | None = None,
           suite: str | None = None, track: str = "") -> tuple[int, str]:
    """Runs the script as a device call would; ``stop_after``: the call's limit kills its whole
    process group then, as the device machine does."""
    env = dict(os.environ, OUT=str(root / "out"), SWEEP_SNAPSHOT_S="1", STUB_STEPS=str(steps), STUB_TRACK=track)
    env.pop("SWEEP_SUITE", None)
    if suite is not None:
        env["SWEEP_SUITE"] = suite
    proc = subprocess.Popen(["bash", str(SWEEP), name, "600", "--levels", "1"], cwd=root, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=stop_after if stop_after is not None else 60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        # `timeout` leads a process group of its own: the stub bench outlives the script's group
        try:
            os.kill(int((root / "stub.pid").read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    return proc.returncode, out


def _state(root: Path, name: str) -> dict[str, str]:
    with tarfile.open(root / "out" / f"{name}.tgz") as tar:
        return {m.name: tar.extractfile(m).read().decode().strip() for m in tar.getmembers() if m.isfile()}


def _keep(root: Path, name: str) -> None:
    """What the developer does after each call: the returned state becomes the next call's start."""
    (root / ".devstate" / name).mkdir(parents=True, exist_ok=True)
    (root / ".devstate" / name / "state.tgz").write_bytes((root / "out" / f"{name}.tgz").read_bytes())


@pytest.mark.slow
def test_a_call_its_limit_stops_returns_a_whole_state_and_the_next_call_resumes_it(tmp_path):
    root = _repo(tmp_path)
    rc, out = _sweep(root, "kb", stop_after=4.0)
    assert rc != 0  # killed, as by the call's limit: the script's own end never ran
    state = _state(root, "kb")  # the last minute's archive (here each second's), whole
    assert state["bench_id"] == BENCH_ID and state["frozen_commit"] == "abc123"
    done = sorted(k for k in state if k.startswith("runs/p"))
    assert len(done) >= 5, done
    assert not list((root / "out").glob(".*part"))
    _keep(root, "kb")
    time.sleep(0.1)
    rc, out = _sweep(root, "kb", steps=2)
    assert rc == 0, out
    assert f"resuming bench {BENCH_ID}" in out and f"resumed {BENCH_ID}" in out
    again = _state(root, "kb")
    assert set(done) < set(k for k in again if k.startswith("runs/p"))  # kept, and more finished
    assert again["bench_id"] == BENCH_ID


@pytest.mark.slow
def test_a_state_made_by_another_frozen_commit_is_refused_before_anything_runs(tmp_path):
    root = _repo(tmp_path, commit="abc123")
    rc, out = _sweep(root, "kb", steps=2)
    assert rc == 0, out
    _keep(root, "kb")
    (root / ".frozen" / "FROZEN_COMMIT").write_text("def456\n")
    (root / "out" / "kb.log").unlink()
    rc, out = _sweep(root, "kb", steps=2)
    assert rc == 1
    assert "kb's state was made by abc123, .frozen/ is def456" in out and "Traceback" not in out
    assert not (root / "out" / "kb.log").exists()  # no bench started


@pytest.mark.slow
def test_a_generated_suite_is_written_by_the_frozen_generator_on_each_call_and_never_carried(tmp_path):
    """SWEEP_SUITE=generated:SEED:COUNT: the bench reads the suite the frozen tree's generator
    writes from that seed (again on the resuming call), the default is KernelBench's checkout, and
    the state holds the runs, not the suite."""
    root = _repo(tmp_path)
    rc, out = _sweep(root, "kb", steps=1)
    assert rc == 0 and "suite ../third_party/KernelBench 1_kb.py" in out, out
    rc, out = _sweep(root, "gen", steps=1, suite="generated:7:12")
    assert rc == 0 and "suite .sweep/gen/suite seed7_count12.py" in out, out
    assert not any(k.startswith("suite") for k in _state(root, "gen"))
    _keep(root, "gen")
    rc, out = _sweep(root, "gen", steps=1, suite="generated:7:12")
    assert rc == 0 and "resumed " + BENCH_ID in out and "seed7_count12.py" in out, out
    for bad, says in (("generated:x", "takes integers"), ("nowhere", "no problem suite at nowhere")):
        rc, out = _sweep(root, "bad", steps=1, suite=bad)
        assert rc == 1 and says in out and "Traceback" not in out, out


@pytest.mark.slow
def test_inductor_records_are_shared_by_every_sweep_and_come_back_from_each_call(tmp_path):
    """A call starts with the records kept here (.devstate/inductor_records) in the bench's cache,
    and returns all it then has, those it made included, even when its limit stops it."""
    root = _repo(tmp_path)
    rc, out = _sweep(root, "kb", steps=2)
    assert rc == 0 and "records \n" in (root / "out" / "kb.log").read_text(), out
    with tarfile.open(root / "out" / "inductor_records.tgz") as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == [
            "inductor_records/p000.json", "inductor_records/p001.json"]
        tar.extractall(root / ".devstate")  # what the developer does after each call
    # a second track of the same problems (another sweep) starts with them, and adds its own
    rc, out = _sweep(root, "relaxed", stop_after=3.0, track="r")
    assert "records p000.json p001.json\n" in (root / "out" / "relaxed.log").read_text(), out
    with tarfile.open(root / "out" / "inductor_records.tgz") as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    assert {"inductor_records/p000.json", "inductor_records/p001.json", "inductor_records/rp000.json"} <= names
    assert not list((root / "out").glob(".*part"))
