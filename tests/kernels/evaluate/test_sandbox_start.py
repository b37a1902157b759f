"""How sandboxes start: forked from a preloaded server (fast), with the judge's environment of the
moment, and spawned when the server cannot serve (import-time settings differ, or a forked child
dies before it is ready)."""

import multiprocessing
import os

import pytest

from loopwise.kernels.evaluate import pool as pool_mod
from loopwise.kernels.evaluate.pool import Sandbox, SandboxPool

pytestmark = pytest.mark.skipif("forkserver" not in pool_mod.mp.get_all_start_methods(),
                                reason="no forkserver start method on this platform")


def _fresh_server_state():
    import multiprocessing.forkserver as fs

    fs._forkserver._stop()
    pool_mod._method = None
    pool_mod._server_env = None


@pytest.fixture(autouse=True)
def fresh_server():
    """Each test starts its own server under the environment of the moment, and leaves none."""
    _fresh_server_state()
    yield
    _fresh_server_state()


def _started(tmp_path, name="box") -> Sandbox:
    box = Sandbox("cpu", {"host_memory_gb": 16}, tmp_path / f"{name}.log")
    box.wait_ready(timeout=120)
    return box


def _parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def test_sandboxes_are_forked_from_the_one_preloaded_server_and_answer(tmp_path):
    import multiprocessing.forkserver as fs

    with SandboxPool("cpu", {"host_memory_gb": 16}, tmp_path, spares=0) as pool:
        first = pool.acquire()
        first.wait_ready(120)  # the first start brings the server up
        box = pool.acquire()
        box.wait_ready(120)
        try:
            assert first.method == box.method == "forkserver"
            server = fs._forkserver._forkserver_pid
            assert server != os.getpid()
            assert _parent_pid(first.proc.pid) == _parent_pid(box.proc.pid) == server  # no second server
            import torch

            reply = box.request("probe_transfer", {"t": torch.arange(4.0)}, 60)
            assert reply["sum"] == 6.0
        finally:
            box.kill()
            first.kill()


def test_import_time_settings_that_changed_mean_spawn(tmp_path, monkeypatch):
    _started(tmp_path, "first").kill()
    assert pool_mod.start_method() == "forkserver"
    monkeypatch.setenv("TRITON_INTERPRET", "0" if pool_mod._server_env.get("TRITON_INTERPRET") == "1" else "1")
    assert pool_mod.start_method() == "spawn"
    box = _started(tmp_path, "second")
    try:
        assert box.method == "spawn"
    finally:
        box.kill()


def test_a_forked_child_that_dies_at_start_switches_to_spawn(tmp_path, monkeypatch):
    _started(tmp_path, "first").kill()
    real_start = Sandbox._start
    calls = []

    def start_then_die(self):
        real_start(self)
        calls.append(self.method)
        if len(calls) == 1:
            self.proc.kill()  # as a child that cannot bring CUDA up would die
            self.proc.join()
            # ... before its ready message: one it may have sent before the kill (a forked child
            # can be ready within milliseconds on a busy machine) is dropped with its pipe
            self.conn, other = multiprocessing.Pipe()
            other.close()

    monkeypatch.setattr(Sandbox, "_start", start_then_die)
    monkeypatch.setattr(pool_mod, "_method", "forkserver")
    box = Sandbox("cpu", {"host_memory_gb": 16}, tmp_path / "dies.log")
    try:
        box.wait_ready(timeout=120)
        assert calls == ["forkserver", "spawn"] and box.method == "spawn"
        assert pool_mod.start_method() == "spawn"
    finally:
        box.kill()


def test_a_sandbox_that_exits_names_the_error_from_its_log():
    tail = ("Traceback (most recent call last):\n  File \"sandbox.py\", line 471, in sandbox_main\n"
            "    torch.cuda.set_device(torch.device(device))\n"
            "ValueError: Expected a torch.device with a specified index or an integer, but got:cuda\n")
    fail = pool_mod._death_reason(1, tail)
    assert (fail.status, fail.code) == ("crash", "process_exit")
    assert "exited with status 1" in fail.message
    assert "ValueError: Expected a torch.device with a specified index" in fail.message
    assert pool_mod._death_reason(1, "").message == "the sandbox process exited with status 1"


def test_a_bare_cuda_device_is_the_current_gpu(tmp_path):
    """"cuda" (no index) is what a user or a script passes; the sandbox must not die on it."""
    import torch

    if not torch.cuda.is_available():
        box = Sandbox("cuda", {"host_memory_gb": 16}, tmp_path / "cuda.log")
        with pytest.raises(pool_mod.SandboxFailure) as err:
            box.wait_ready(timeout=120)
        box.kill()
        # no GPU here: the start fails, and says why instead of only an exit status
        assert "cuda" in err.value.message.lower() and ":" in err.value.message
        return
    box = Sandbox("cuda", {"host_memory_gb": 16}, tmp_path / "cuda.log")
    try:
        assert box.wait_ready(timeout=300)["device_name"]
    finally:
        box.kill()


def test_a_temporary_folder_too_long_for_the_servers_socket_means_spawn(tmp_path, monkeypatch):
    """The forkserver listens on a Unix socket under TMPDIR, and a socket path has at most 107 bytes:
    with a TMPDIR longer than that leaves room for, sandboxes are spawned (and answer) instead of
    the judge failing with "AF_UNIX path too long"."""
    import tempfile

    deep = tmp_path / ("d" * 40) / ("e" * 40)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert len(str(deep)) + 32 > 107
    box = _started(tmp_path)
    try:
        assert box.method == "spawn" and pool_mod.start_method() == "spawn"
        import torch

        assert box.request("probe_transfer", {"t": torch.arange(3.0)}, 60)["sum"] == 3.0
    finally:
        box.kill()
    _fresh_server_state()
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    assert pool_mod.start_method() == "forkserver"


# A problem whose output says how long the collection before a timed call took: its first call
# (the judge's untimed one) measures a full collection, with what the sandbox lived with before it.
COLLECTING = '''
import gc, time
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        t0 = time.perf_counter()
        gc.collect()
        return x + (time.perf_counter() - t0)

def get_inputs():
    return [torch.zeros(1)]

def get_init_inputs():
    return []
'''


def test_a_full_collection_in_a_sandbox_walks_what_the_candidate_made_not_torch(tmp_path):
    """What the sandbox imported before it was ready (torch, Triton) is never garbage: the timing
    loop's collection before each pass must not walk it (a tenth of a second and more, each pass)."""
    from loopwise.kernels.evaluate.inputs import for_sandbox

    with SandboxPool("cpu", {"host_memory_gb": 16}, tmp_path, spares=0) as pool:
        box = pool.acquire()
        try:
            box.request("load", {"kind": "eager", "problem_source": COLLECTING}, 120)
            box.request("stage", {"sets": [for_sandbox([__import__("torch").zeros(1)], None)]}, 60)
            reply = box.request("time", {"trials": 1, "warmup": 0, "keep": [0], "device_outputs": False}, 60)
        finally:
            box.kill()
    (collect_s,) = next(iter(reply["kept"].values()))
    assert float(collect_s) < 0.02, f"a full collection in the sandbox took {float(collect_s):.3f} s"
