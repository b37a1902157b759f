"""Sandbox processes: spawned ahead of time, one per candidate, killed after use or on a fault.

The judge talks to a sandbox through ``request``, which enforces the timeout of each phase and a
host-memory limit, and turns every way a process can fail (exception, hang, signal, CUDA fault,
out-of-memory) into a ``SandboxFailure`` carrying an evaluation status.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import re
import shutil
import signal
import tempfile
import time
import weakref
from pathlib import Path
from typing import Callable

from loopwise.core import stopping
from loopwise.kernels.evaluate.environment import sandbox_environ
from loopwise.kernels.evaluate.out_of_memory import REQUEST_PHASES, is_out_of_memory, out_of_memory_message
from loopwise.kernels.evaluate.sandbox_process import PRELOAD, sandbox_main

log = logging.getLogger(__name__)
_POLL_S = 0.05

# How sandboxes start. "forkserver": forked from a server process that imported torch, Triton and
# the sandbox code once and never touched CUDA or candidate code, so a start costs a fork and a
# CUDA context instead of those imports (seconds); the children inherit nothing from the judge.
# "spawn": a fresh interpreter each time. LOOPWISE_SANDBOX_START picks one; a forkserver sandbox
# that dies before it is ready switches this process to spawn for good.
START_ENV = "LOOPWISE_SANDBOX_START"
# Variables that shape what these libraries build when imported: with TRITON_INTERPRET, Triton's
# own @jit helpers (tl.cdiv, reductions) are made for the interpreter. A child forked from the
# server has the server's modules, so when the judge's value differs, that sandbox is spawned.
# (Not every TORCH* variable: torch sets TORCHINDUCTOR_CACHE_DIR itself at run time.)
_IMPORT_TIME_ENV = ("TRITON_INTERPRET", "PYTORCH_NVML_BASED_CUDA_CHECK")
_method: str | None = None
_server_env: dict | None = None


def _import_env() -> dict:
    return {k: os.environ.get(k) for k in _IMPORT_TIME_ENV}


def start_method() -> str:
    global _method, _server_env
    if _method is None:
        wanted = os.environ.get(START_ENV, "forkserver")
        _method = wanted if wanted in mp.get_all_start_methods() else "spawn"
        if _method == "forkserver" and not _socket_fits():
            log.info("the temporary folder %s is too long a path for the forkserver's socket; "
                     "starting sandboxes with spawn", tempfile.gettempdir())
            _method = "spawn"
        if _method == "forkserver":
            # The server must never initialize CUDA (a forked child could not use it): torch asks
            # NVML, not the CUDA runtime, whether a GPU is there.
            os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
            mp.get_context("forkserver").set_forkserver_preload(PRELOAD)
            _server_env = _import_env()
    if _method == "forkserver" and _import_env() != _server_env:
        return "spawn"
    return _method


# The forkserver listens on a Unix socket at TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, whose path
# must fit sun_path (108 bytes with its terminating NUL on Linux, 104 on macOS).
_SOCKET_PATH_MAX, _SOCKET_SUFFIX = 103, len("/pymp-xxxxxxxx/listener-xxxxxxxx")


def _socket_fits() -> bool:
    return len(os.fsencode(tempfile.gettempdir())) + _SOCKET_SUFFIX <= _SOCKET_PATH_MAX


def _fall_back_to_spawn(why: str) -> None:
    global _method
    if _method != "spawn":
        log.warning("a forked sandbox failed to start (%s); starting sandboxes with spawn from now on", why)
        _method = "spawn"


# The sandbox's host-memory limit when none is set: half the machine's memory (or its cgroup's),
# at most 32 GiB. The judge holds the problem's inputs and reference outputs in host memory beside
# the sandbox, and the OS needs the rest: a limit at or above the machine's memory would never
# stop a runaway candidate before the kernel's OOM killer, which may pick the judge instead.
HOST_MEMORY_FRACTION, HOST_MEMORY_CAP_GB = 0.5, 32.0
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def machine_memory_gb() -> float | None:
    """This machine's memory in GiB, or its cgroup's limit when that is lower; None if unknown."""
    sizes = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            sizes.append(int(text))
    return min(sizes) / 2**30 if sizes else None


def host_memory_limit_gb(setting: float | None) -> float:
    """The sandbox's host-memory limit in GiB: ``setting`` when given, else derived from the machine."""
    if setting is not None:
        return float(setting)
    total = machine_memory_gb()
    return HOST_MEMORY_CAP_GB if total is None else min(HOST_MEMORY_CAP_GB, HOST_MEMORY_FRACTION * total)


class SandboxFailure(Exception):
    """A request that ended without an answer: status is one of the Evaluation statuses."""

    def __init__(self, status: str, code: str, message: str) -> None:
        super().__init__(f"{status}/{code}: {message}")
        self.status, self.code, self.message = status, code, message


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _death_reason(exitcode: int | None, log_tail: str, op: str | None = None) -> SandboxFailure:
    text = log_tail.lower()
    if is_out_of_memory(log_tail):
        where = REQUEST_PHASES.get(op or "", op or "a request")
        return SandboxFailure("oom", "out_of_memory", out_of_memory_message("the sandbox", where, log_tail))
    if "illegal memory access" in text or "cuda error" in text:
        return SandboxFailure("crash", "cuda_fault", "CUDA fault: " + _last_line(log_tail, "cuda"))
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return SandboxFailure("crash", "killed_by_signal", f"the sandbox process died of {name}")
    message = f"the sandbox process exited with status {exitcode}"
    error = _error_line(log_tail)
    return SandboxFailure("crash", "process_exit", f"{message}: {error}" if error else message)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


def _error_line(text: str) -> str:
    """The last exception line of a Python traceback in ``text`` (its type and message), or ""."""
    for line in reversed(text.splitlines()):
        if _EXCEPTION_LINE.match(line.strip()):
            return line.strip()[:300]
    return ""


def _last_line(text: str, needle: str) -> str:
    for line in reversed(text.splitlines()):
        if needle in line.lower():
            return line.strip()[:300]
    return ""


class Sandbox:
    """One sandbox process and the pipe to it."""

    def __init__(self, device: str, settings: dict, log_path: Path) -> None:
        self.device = device
        self.log_path = log_path
        self.settings = settings
        # Called before every request (the judge gives back its cached device memory there).
        self.before_request: Callable[[], None] | None = None
        self._start()

    def _start(self) -> None:
        self.method = start_method()
        ctx = mp.get_context(self.method)
        self.conn, child = ctx.Pipe()
        # Its scratch folder (the candidate's module, a private cache) is made and removed here: the
        # sandbox itself is killed, never given the chance to clean up. The finalizer covers a
        # sandbox never killed (a spare still waiting when the program ends).
        self.scratch = tempfile.mkdtemp(prefix="loopwise-sandbox-")
        self._remove_scratch = weakref.finalize(self, shutil.rmtree, self.scratch, True)
        # The allowed part of the judge's environment as it is now (a forked child would otherwise
        # get the server's); the sandbox drops everything else before any candidate code runs.
        settings = {**self.settings, "environ": sandbox_environ(), "scratch": self.scratch}
        self.proc = ctx.Process(target=sandbox_main, args=(child, self.device, str(self.log_path), settings),
                                daemon=True, name="loopwise-sandbox")
        self.started_wall = time.time()
        self.proc.start()
        child.close()
        self.info: dict | None = None

    def wait_ready(self, timeout: float) -> dict:
        if self.info is None:
            try:
                kind, info = self._receive(timeout, "start")
            except SandboxFailure as fail:
                if self.method == "spawn":
                    raise
                _fall_back_to_spawn(fail.message)
                self.kill()
                self._start()
                kind, info = self._receive(timeout, "start")
            self.info = info
        return self.info

    def request(self, op: str, payload: dict, timeout: float) -> dict:
        """Sends one request and waits for its answer; raises SandboxFailure on any failure."""
        self.wait_ready(timeout=max(timeout, 300.0))
        if self.before_request is not None:
            self.before_request()
        try:
            self.conn.send((op, payload))
        except (BrokenPipeError, OSError):
            raise self._died(op) from None
        kind, body = self._receive(timeout, op)
        if kind == "error":
            raise SandboxFailure(body["status"], body["code"], body["message"])
        return body

    def _receive(self, timeout: float, phase: str):
        limit = host_memory_limit_gb(self.settings.get("host_memory_gb")) * 2**30
        deadline = time.monotonic() + timeout
        while True:
            if stopping.requested():
                # the thread waiting here was told to stop (Ctrl-C or SIGTERM reach the main thread
                # only): the sandbox's work (a verdict, a compile) ends now, not when it is done
                self.kill()
                raise stopping.Stopped()
            try:
                if self.conn.poll(_POLL_S):
                    return self.conn.recv()
            except (EOFError, OSError):
                raise self._died(phase) from None
            if not self.proc.is_alive():
                raise self._died(phase)
            if _rss_bytes(self.proc.pid) > limit:
                self.kill()
                raise SandboxFailure("oom", "host_memory_limit",
                                     f"the sandbox used more than {limit / 2**30:.3g} GiB of host memory during "
                                     f"{REQUEST_PHASES.get(phase, phase)}")
            if time.monotonic() > deadline:
                self.kill()
                raise SandboxFailure("timeout", f"{phase}_timeout", f"no answer after {timeout:.0f}s during {phase}")

    def _died(self, op: str | None = None) -> SandboxFailure:
        self.proc.join(timeout=5)
        return _death_reason(self.proc.exitcode, self.log_tail(), op)

    def log_tail(self, limit: int = 20000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", errors="replace")

    def kill(self) -> None:
        # A used sandbox holds nothing worth a clean exit (its log is written as it goes), and an
        # orderly interpreter shutdown with torch loaded costs about half a second. The whole
        # process group goes: compilers it started must not keep build locks.
        if self.proc.pid is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()
        self._remove_scratch()


class SandboxPool:
    """Keeps ``spares`` sandboxes started so an evaluation does not wait for torch and CUDA to load."""

    def __init__(self, device: str, settings: dict, log_dir: str | Path | None = None, spares: int = 1) -> None:
        self.device = device
        self.settings = dict(settings)
        # Logs go to the caller's folder (a run keeps them); without one, to a temporary folder
        # removed at close, when no sandbox of this pool is left to read a log tail from.
        self._own_logs = log_dir is None
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="loopwise-logs-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # a pool never closed (its program ended first) removes its own log folder at exit
        self._remove_logs = weakref.finalize(self, shutil.rmtree, str(self.log_dir), True) if self._own_logs else None
        self.spares = spares
        self._ready: list[Sandbox] = []
        self._count = 0
        self._fill()

    def _start(self) -> Sandbox:
        self._count += 1
        return Sandbox(self.device, self.settings, self.log_dir / f"sandbox-{os.getpid()}-{self._count}.log")

    def _fill(self) -> None:
        if stopping.requested():  # no spare starts for work that is stopping
            return
        while len(self._ready) < self.spares:
            self._ready.append(self._start())

    def acquire(self, replace: bool = True) -> Sandbox:
        """A fresh sandbox (never one that ran other candidate code). Its replacement starts now, or
        with ``replace=False`` at the caller's :meth:`replenish` (after its timed calls, so no process
        is loading CUDA beside them and the timing need not wait for one)."""
        box = self._ready.pop(0) if self._ready else self._start()
        if replace:
            self._fill()
        return box

    def replenish(self) -> None:
        """Starts spares up to the pool's count."""
        self._fill()

    def wait_spares(self, timeout: float = 300.0) -> None:
        """Blocks until the started spares have loaded torch (so none is starting up beside a timing)."""
        for box in self._ready:
            try:
                box.wait_ready(timeout)
            except SandboxFailure:
                pass

    def close(self) -> None:
        for box in self._ready:
            box.kill()
        self._ready.clear()
        if self._remove_logs is not None:
            self._remove_logs()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
